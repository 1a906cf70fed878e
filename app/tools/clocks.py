"""nvidia-smi and DCGM over the instance's GPUs (artifacts["gpus"], the same numbers the
scenario's physics used: a throttled GPU's SM clock is the clock its kernels ran at)."""

from __future__ import annotations

from app.tools.base import Tool

# nvidia-smi's "Clocks Event Reasons" rows and their DCGM_FI_DEV_CLOCKS_EVENT_REASONS bits.
REASONS = [("Idle", 0x1), ("Applications Clocks Setting", 0x2), ("SW Power Cap", 0x4), ("HW Slowdown", 0x8),
           ("Sync Boost", 0x10), ("SW Thermal Slowdown", 0x20), ("HW Thermal Slowdown", 0x40),
           ("HW Power Brake Slowdown", 0x80)]
_INDENT = {"HW Thermal Slowdown": 12, "HW Power Brake Slowdown": 12}


def _active(gpu: dict, reason: str) -> str:
    return "Active" if reason in gpu.get("throttle_reasons", []) else "Not Active"


def nvidia_smi(inst) -> str:
    gpus = inst.artifacts["gpus"]
    sampled = all("utilization_samples" in g for g in gpus)  # NVML's per-period readings, where a case has them
    out = [f"$ nvidia-smi -q -d PERFORMANCE,CLOCK{',UTILIZATION' if sampled else ''}   # {len(gpus)} GPU(s)", "",
           "==============NVSMI LOG==============", ""]
    for g in gpus:
        out.append(f"GPU 00000000:{0x18 + 0x10 * g['index']:02X}:00.0   ({g['name']}, index {g['index']})")
        out.append(f"    {'Performance State':<38}: {g.get('performance_state', 'P0')}")
        out.append("    Clocks Event Reasons")
        order = ["Idle", "Applications Clocks Setting", "SW Power Cap", "HW Slowdown", "HW Thermal Slowdown",
                 "HW Power Brake Slowdown", "Sync Boost", "SW Thermal Slowdown"]
        for r in order:
            pad = _INDENT.get(r, 8)
            out.append(" " * pad + f"{r:<{42 - pad}}: {_active(g, r)}")
        out.append(f"        {'Display Clock Setting':<34}: Not Active")
        out.append("    Clocks")
        out.append(f"        {'Graphics':<34}: {g['sm_clock_mhz']} MHz")
        out.append(f"        {'SM':<34}: {g['sm_clock_mhz']} MHz")
        out.append(f"        {'Memory':<34}: {g['mem_clock_mhz']} MHz")
        out.append("    Max Clocks")
        out.append(f"        {'SM':<34}: {g['max_sm_clock_mhz']} MHz")
        out.append(f"    {'GPU Current Temp':<38}: {g['temperature_c']} C")
        out.append(f"    {'Power Draw':<38}: {g['power_w']:.2f} W / {g['power_limit_w']:.2f} W")
        out.append(f"    {'Utilization (GPU)':<38}: {g['utilization_pct']:.0f} %")
        if sampled:
            u = g["utilization_samples"]
            out.append("    GPU Utilization Samples")
            out.append(f"        {'Duration':<34}: {u['n'] * u['period_s']:.2f} sec")
            out.append(f"        {'Number of Samples':<34}: {u['n']}")
            for k in ("Max", "Min", "Avg"):
                out.append(f"        {k:<34}: {u[k.lower()]:.0f} %")
        out.append("")
    if sampled:
        # utilization.gpu: the share of each sample period in which one or more kernels ran (NVML)
        period_ms = gpus[0]["utilization_samples"]["period_s"] * 1e3
        out.append(f"$ nvidia-smi --query-gpu=index,utilization.gpu --format=csv -lms {period_ms:.0f}")
        out.append("index, utilization.gpu [%]")
        n = max(g["utilization_samples"]["n"] for g in gpus)
        for j in range(n):
            for g in gpus:
                r = g["utilization_samples"]["readings_pct"]
                if j < len(r):
                    out.append(f"{g['index']}, {r[j]} %")
    return "\n".join(out).rstrip()


def dcgm(inst) -> str:
    """`dcgmi dmon` rows: SM clock (100), memory clock (101), clock event reasons (112),
    temperature (150), power (155)."""
    gpus = inst.artifacts["gpus"]
    out = ["$ dcgmi dmon -e 100,101,112,150,155 -c 1",
           "#Entity   SMCLK   MMCLK   CLKEVT  TMPTR   POWER",
           "ID        MHZ     MHZ             C       W"]
    for g in gpus:
        bits = sum(bit for name, bit in REASONS if name in g.get("throttle_reasons", []))
        out.append(f"GPU {g['index']:<5} {g['sm_clock_mhz']:<7} {g['mem_clock_mhz']:<7} {bits:<7} "
                   f"{g['temperature_c']:<7} {g['power_w']:.3f}")
    reasons = {name: bit for name, bit in REASONS}
    active = sorted({r for g in gpus for r in g.get("throttle_reasons", [])})
    if active:
        out.append("")
        out.append("CLKEVT bits: " + ", ".join(f"0x{reasons[r]:X} = {r}" for r in active if r in reasons))
    return "\n".join(out)


TOOLS = (
    Tool("nvidia-smi", "nvidia-smi: clocks and clock event reasons", "nvidia-smi -q -d PERFORMANCE,CLOCK", nvidia_smi),
    Tool("dcgm", "DCGM: SM clock, clock event reasons, temperature, power", "dcgmi dmon -e 100,101,112,150,155", dcgm),
)
