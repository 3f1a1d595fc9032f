"""Judging one test's figures against the stored baselines, or staging them with ``--update-baselines``."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from pytest_dlperf.judging.baselines import BaselineStore, entry_key
from pytest_dlperf.judging.gates import Policy
from pytest_dlperf.judging.noise import kind_of
from pytest_dlperf.judging.outcomes import IMPROVEMENT, REGRESSION, UPDATED
from pytest_dlperf.judging.verdict import Verdict, compare
from pytest_dlperf.result import Metric, TrainingResult

#: What a baseline file records of the machine (beside its hardware key).
HARDWARE_FACTS = ("cpu_model", "cpu_vendor", "cpu_family", "cpu_model_number", "isa_native", "isa_level",
                  "usable_cpus", "physical_cores", "numa_nodes", "machine", "gpus", "gpu_memory_mib", "gpu_driver")


def judge(store: BaselineStore, nodeid: str, profile: str,
          figures: Sequence[tuple[str, Metric, TrainingResult]], policy: Policy, update: bool) -> list[Verdict]:
    """Each (label, figure, the result it came from) compared with its recorded runs on that result's
    machine, before the run's common shift is known (so its spread counts in the gate), its gate no
    narrower than ``policy``'s tolerance for it and set at its level; when ``update``, each is staged as a
    new run instead and its verdict says ``updated``."""
    verdicts = []
    for label, metric, result in figures:
        hw = result.environment.get("hardware_key", "unknown")
        key = entry_key(nodeid, label, profile)
        software = result.software
        noise = store.noise(hw)
        framework = str(software.get("framework", ""))
        recorded = noise.figures.get((key, metric.name))
        kind = recorded.kind if recorded is not None else kind_of(metric.name, metric.unit)
        verdict = compare(nodeid, label, metric, store.lookup(hw, key, metric.name), policy.tolerance(metric.name),
                          software, reasons=result.details.get(f"{metric.name}_reasons", ()),
                          spread=noise.spread(key, metric.name, framework, kind), alpha=policy.figure_alpha,
                          shared=noise.unknown_shift(framework, kind, key, metric.name), kind=kind)
        if update:
            # a run beyond its gate is a real change being accepted: the history starts again from it
            store.stage(hw, _hardware_facts(result), key, metric, software,
                        restart=verdict.status in (REGRESSION, IMPROVEMENT),
                        host=str(result.environment.get("host_key", "")))
            verdict = dataclasses.replace(verdict, status=UPDATED, baseline=None, gate=None, gate_half=None,
                                          interval=None, noise=None, p_value=None, df=0.0)
        verdicts.append(dataclasses.replace(verdict, hardware=hw, follows_shift=noise.follows(key, metric.name)))
    return verdicts


def _hardware_facts(result: TrainingResult) -> dict[str, Any]:
    if "counting_model" in result.environment:  # a counted figure's file describes what counted it
        return dict(result.environment["counting_model"])
    return {k: result.environment[k] for k in HARDWARE_FACTS if k in result.environment}
