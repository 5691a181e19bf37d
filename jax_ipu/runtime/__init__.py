"""PJRT's object model for the IPU Model: client, devices, memories, buffers, executables.

Owns the private XLA:CPU client that holds the data and runs the numerics."""
