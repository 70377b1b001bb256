"""The learning rate at each optimizer step: the twin of cutrain's kernels/lr_schedule.h (read it for
the formulas), so that the PyTorch reference follows the very same schedule. No torch here: the tests import it
on machines without it.
"""
import math

KINDS = ("constant", "cosine", "onecycle", "step")
MAX_MILESTONES = 8  # the most --lr-milestones, kMaxLrMilestones


def _cosine_between(start, end, fraction):
    return end + (start - end) * (1.0 + math.cos(math.pi * fraction)) / 2.0


def lr_at(kind, base_lr, total_steps, warmup_steps, step, milestones=(0.5, 0.75), gamma=0.1):
    """The rate of optimizer step `step` (0-based, across epochs) of a run of `total_steps` steps; `milestones`
    and `gamma` are the step schedule's (--lr-milestones, --lr-gamma)."""
    t = min(max(step, 0), max(total_steps - 1, 0))
    if kind == "onecycle":  # PyTorch's OneCycleLR, its defaults: no separate warm-up
        peak_step = 0.3 * total_steps - 1.0
        initial_lr = base_lr / 25.0
        final_lr = initial_lr / 1e4
        if t <= peak_step:
            return _cosine_between(initial_lr, base_lr, t / peak_step if peak_step > 0 else 1.0)
        rest = total_steps - 1.0 - peak_step
        return _cosine_between(base_lr, final_lr, (t - peak_step) / rest if rest > 0 else 1.0)
    if t < warmup_steps:
        return base_lr * (t + 1) / warmup_steps
    if kind == "cosine":
        return _cosine_between(base_lr, 0.0, (t - warmup_steps) / max(total_steps - warmup_steps, 1))
    if kind == "step":  # MultiStepLR at the milestone steps floor(m * total_steps)
        lr = base_lr
        for m in milestones:
            if t >= int(m * total_steps):
                lr *= gamma
        return lr
    if kind == "constant":
        return base_lr
    raise ValueError(f"--lr-schedule {kind}: expected one of {', '.join(KINDS)}")
