"""The PJRT C API of the ipu platform: the C table, its ctypes layouts, and the slot handlers.

Nothing here is IPU-specific; the runtime below answers every question about the device."""
