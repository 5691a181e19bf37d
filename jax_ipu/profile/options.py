"""What the user asked the profiler for, from POPLAR_ENGINE_OPTIONS and PVTI_OPTIONS.

Parsing and key checks live in jax_ipu.config; this module turns them into one settings object."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from jax_ipu import config

logger = logging.getLogger(__name__)

DEFAULT_DIRECTORY = "./reports"


@dataclass(frozen=True)
class ProfileOptions:
    """Which reports to write, and where."""

    graph: bool = False
    execution: bool = False
    flops: bool = False
    directory: Path = Path(DEFAULT_DIRECTORY)
    timeline: bool = False
    timeline_directory: Path = Path(DEFAULT_DIRECTORY)

    @property
    def reports(self) -> bool:
        return self.graph or self.execution

    @property
    def wanted(self) -> bool:
        return self.reports or self.timeline


def read_options() -> ProfileOptions:
    """The options from the environment; options that would do nothing are warned about."""
    engine = config.engine_options()
    pvti = config.pvti_options()
    every = engine.get("autoReport.all", False)
    graph = engine.get("autoReport.outputGraphProfile", every)
    execution = engine.get("autoReport.outputExecutionProfile", every)
    options = ProfileOptions(
        graph=graph, execution=execution,
        flops=engine.get("profiler.includeFlopEstimates", False),
        directory=Path(engine.get("autoReport.directory", DEFAULT_DIRECTORY)),
        timeline=pvti.get("enable", False),
        timeline_directory=Path(pvti.get("directory", DEFAULT_DIRECTORY)),
    )
    # Nothing is silently ignored: say which option has no effect on its own.
    if not options.reports:
        for key in ("autoReport.directory", "profiler.includeFlopEstimates"):
            if key in engine:
                logger.warning("%s in %s has no effect: no report is enabled (set "
                               "autoReport.all or autoReport.output*Profile to \"true\").",
                               key, config.ENGINE_OPTIONS_VAR)
    if "directory" in pvti and not options.timeline:
        logger.warning("directory in %s has no effect: the timeline is not enabled (set "
                       "\"enable\": \"true\").", config.PVTI_OPTIONS_VAR)
    return options
