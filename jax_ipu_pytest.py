"""pytest plugin of jax-ipu: its jax.config options exist before the first test runs.

jax discovers the ipu plugin, which registers the jax_ipu_* options, when a backend is first used:
inside a test, after a harness such as jax's own JaxTestCase saved the config it compares when
the test ends. Once the test modules are collected, and only if they imported jax, this imports
jax_ipu, which registers them. `import jax` itself is untouched."""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger(__name__)


def pytest_collection_finish(session: object) -> None:
    if "jax" not in sys.modules:  # a suite that never imports jax pays nothing
        return
    try:
        import jax_ipu  # noqa: F401  (registers the jax_ipu_* options)
    except Exception:  # a broken install must not stop a user's suite; jax reports it later
        logger.warning("jax-ipu could not register its jax.config options", exc_info=True)
