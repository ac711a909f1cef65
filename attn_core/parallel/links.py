"""Published figures of the links between accelerators, for the time model of
:func:`attn_core.formulas.ring_step` (latency alpha in seconds, bandwidth beta_l in bytes per second,
one direction).

* NVLink 4 (H100 SXM): 900 GB/s per GPU counting both directions (NVIDIA's NVLink page), so 450 GB/s
  each way.
* InfiniBand NDR: 400 Gb/s per port (NVIDIA's networking documentation), 50 GB/s each way; a DGX
  H100 gives each GPU its own 400 Gb/s port.
* alpha: what NCCL's own tuning model (src/graph/tuning.cc) charges one step of its ring algorithm
  with the Simple protocol, a base of 8.4 us plus 3.4 us over NVLink or 14 us over the network. It is
  NCCL's estimate, not a measurement, and it matters only for small messages.
"""

from __future__ import annotations

#: name -> {"alpha": seconds, "beta_l": bytes per second one way, "source": where the figures are from}
LINKS: dict[str, dict] = {
    "NVLink 4 (H100 SXM)": {
        "alpha": 8.4e-6 + 3.4e-6,
        "beta_l": 900e9 / 2,
        "source": "https://www.nvidia.com/en-us/data-center/nvlink/; NCCL src/graph/tuning.cc",
    },
    "InfiniBand NDR (400 Gb/s)": {
        "alpha": 8.4e-6 + 14.0e-6,
        "beta_l": 400e9 / 8,
        "source": "https://docs.nvidia.com/networking/display/800GMMA4Z00NS/Overview; "
                  "NCCL src/graph/tuning.cc",
    },
}
