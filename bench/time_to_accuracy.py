"""The clock and the accuracy target of a training run: the twins of cutrain's app/run_clock.h and
app/accuracy_tracker.h (read their headers), so that both programs' images/s and time to accuracy mean the same.

    training time  from the first step, less evaluations and checkpoint writes: time to accuracy
    step time      training time less the epoch-start waits (the loader filling its pipeline): images/s

No torch here: the tests import it on machines without it.
"""
import time

EVALUATION, CHECKPOINT, EPOCH_START = "evaluation", "checkpoint", "epoch_start"


class RunClock:
    """Where the wall time goes. The caller waits for the device before pausing, so queued steps count."""

    def __init__(self, now=time.perf_counter):
        self.now = now
        self.start()

    def start(self):
        self.started = self.now()
        self.paused_since, self.reason = None, None
        self.paused = {EVALUATION: 0.0, CHECKPOINT: 0.0, EPOCH_START: 0.0}

    def pause(self, reason):
        if self.paused_since is None:
            self.paused_since, self.reason = self.now(), reason

    def resume(self):
        if self.paused_since is not None:
            self.paused[self.reason] += self.now() - self.paused_since
            self.paused_since = None

    def paused_s(self, reason):
        ongoing = self.now() - self.paused_since if self.paused_since is not None and self.reason == reason else 0.0
        return self.paused[reason] + ongoing

    def training_s(self):
        return self.now() - self.started - self.paused_s(EVALUATION) - self.paused_s(CHECKPOINT)

    def step_s(self):
        return self.training_s() - self.paused_s(EPOCH_START)


class AccuracyTracker:
    """When to evaluate (every `every_epochs` epochs, or every `every_steps` steps, and at the end of the last
    epoch), the best and final test accuracy, and the first evaluation that reaches `target` (None: no target)."""

    def __init__(self, every_epochs, every_steps, epochs, target, steps_per_epoch):
        if target is not None and not every_epochs and not every_steps:
            raise ValueError("--target-accuracy needs evaluations: --eval-every E or --eval-every-steps N")
        self.every_epochs, self.every_steps, self.epochs = every_epochs, every_steps, epochs
        self.target, self.steps_per_epoch = target, steps_per_epoch
        self.best = self.final = self.reached = None

    def due(self, epoch, epoch_end, step):
        last = epoch_end and epoch == self.epochs
        if self.every_steps:
            return last or step % self.every_steps == 0
        return epoch_end and bool(self.every_epochs) and (epoch % self.every_epochs == 0 or last)

    def add_evaluation(self, accuracy, step, clock):
        """True when this evaluation is the first to reach the target: the run stops."""
        self.final = accuracy
        self.best = accuracy if self.best is None else max(self.best, accuracy)
        if self.target is None or self.reached is not None or accuracy < self.target:
            return False
        self.reached = dict(accuracy=accuracy, training_s=clock.training_s(), evaluation_s=clock.paused_s(EVALUATION),
                            steps=step, epochs=step / self.steps_per_epoch)
        return True

    def summary_fields(self):
        """The summary record's target fields, as cutrain writes them."""
        r = self.reached or {}
        return dict(target_acc=self.target, target_reached=None if self.target is None else bool(r),
                    time_to_target_s=r.get("training_s"), target_epochs=r.get("epochs"), target_steps=r.get("steps"))

    def summary_line(self, epochs_run):
        """cutrain's closing line about the target; empty without one."""
        if self.target is None:
            return ""
        if self.reached:
            r = self.reached
            return (f"time to {100 * self.target:.2f}% test accuracy: {r['training_s']:.1f} s of training, "
                    f"{r['epochs']:.2f} epochs ({r['steps']} steps); evaluations took {r['evaluation_s']:.1f} s more")
        if self.best is not None:
            return (f"target {100 * self.target:.2f}% test accuracy not reached in {epochs_run} epochs "
                    f"(best {100 * self.best:.2f}%)")
        return f"target {100 * self.target:.2f}% test accuracy not reached: no evaluation ran"
