"""The IPU Model served over the network: a server speaking the IFRT proxy protocol that stock
jaxlib's client uses (`python -m jax_ipu serve`), and the switch that points jax at one.

Needs the `remote` extra (grpcio, protobuf) on the server; a client needs only jax and jaxlib."""
