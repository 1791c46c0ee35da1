"""Which published figure moves each kind of the priors on an accelerator off the corpus, decided
here from the work's arithmetic intensity, not read back from ``devices.KIND_RESOURCE``.

MI300X's ridge point is 1307 TF / 5.3 TB/s = 247 FLOP per byte. AdamW's step does ~12 FLOPs per
parameter over ~16 bytes of fp32 master weight, gradient and two moments read and written again
(~0.4 FLOP/byte), and a decode iteration of a few hundred tokens reads every weight once for a few
hundred FLOPs per weight byte pair at most: both are bound by HBM, so their slowdowns move by the
STREAM-triad figure (4.09 of 5.3 TB/s against H100's 2.97 of 3.35). The trainer's forward and
backward passes are GEMMs over thousands of tokens (~10^3-10^4 FLOP/byte): the MAMF figure (668.4
of 1307.4 TF against H100's 794.5 of 989). Host work and PCIe offload have no device figure and
keep the priors. A planted swap of a kind's resource (the optimizer priced by the GEMM figure) moves
its slowdown by 0.636 instead of 0.870 and fails here.
"""

from __future__ import annotations

import pytest

from polytrace.run.hardware import get_gpu
from polytrace.stepmodel import devices
from polytrace.stepmodel.efficiency import load_priors

GEMM = (668.4 / 1307.4) / (794.5 / 989.0)  # 0.636
HBM = (4090.0 / 5300.0) / (2970.0 / 3350.0)  # 0.870
BY_INTENSITY = {
    "optimizer": HBM, "rollout.eager": HBM, "rollout.cuda_graphs": HBM,
    "forward": GEMM, "train.no_checkpointing": GEMM, "train.checkpointing": GEMM,
    # RCCL 316.8 of 448 GB/s = 0.707 >= the 0.70 every link is priced at: capped at 1
    "collectives": 1.0,
    "rollout_host.eager": 1.0, "rollout_host.cuda_graphs": 1.0, "rollout_seq_host": 1.0, "trainer_host": 1.0,
    "offload": 1.0,
}


def test_each_kind_on_mi300x_moves_by_the_figure_of_the_resource_bounding_it():
    base = load_priors()
    scaled = devices.scale_priors(load_priors(), get_gpu("mi300x"))
    assert set(base["kinds"]) == set(BY_INTENSITY)  # a new kind must be placed here, with its reason
    assert 0.63 < GEMM < 0.64 and 0.86 < HBM < 0.88
    for kind, entry in base["kinds"].items():
        got = float(entry["slowdown"]) / float(scaled["kinds"][kind]["slowdown"])
        assert got == pytest.approx(BY_INTENSITY[kind], rel=1e-9), kind
