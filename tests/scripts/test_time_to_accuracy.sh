# bench/time_to_accuracy.py, the reference's twin of cutrain's app/run_clock.h and app/accuracy_tracker.h, on
# a hand-driven clock: what each pause leaves out, when evaluations fall, and the first evaluation to reach
# the target with its time, steps and epochs. Standard library only.
source "$(dirname "$0")/common.sh"
python3 - <<'PY' || fail "time_to_accuracy.py"
from time_to_accuracy import CHECKPOINT, EPOCH_START, EVALUATION, AccuracyTracker, RunClock

now = [100.0]
clock = RunClock(now=lambda: now[0])
def advance(seconds): now[0] += seconds
clock.pause(EPOCH_START); advance(2); clock.resume()   # the loader's first batch
advance(10)                                            # steps
clock.pause(EVALUATION); advance(3)
assert clock.paused_s(EVALUATION) == 3 and clock.training_s() == 12, clock.training_s()  # frozen while paused
clock.pause(CHECKPOINT)                                # already paused: no change of reason
advance(1); clock.resume()
clock.pause(CHECKPOINT); advance(5); clock.resume()
advance(4)
assert clock.training_s() == 16 and clock.step_s() == 14, (clock.training_s(), clock.step_s())
assert clock.paused_s(EVALUATION) == 4 and clock.paused_s(CHECKPOINT) == 5 and clock.paused_s(EPOCH_START) == 2

# by epochs: every 2nd epoch and the last (5); by steps: every 30 steps and the end of the last epoch
by_epochs = AccuracyTracker(2, 0, 5, None, 10)
assert [e for e in range(1, 6) if by_epochs.due(e, True, 10 * e)] == [2, 4, 5]
assert not by_epochs.due(2, False, 15)
by_steps = AccuracyTracker(1, 30, 5, 0.9, 10)
assert [s for s in range(1, 51) if by_steps.due((s - 1) // 10 + 1, s % 10 == 0, s)] == [30, 50]
assert not by_steps.add_evaluation(0.5, 30, clock) and not by_steps.add_evaluation(0.95 - 0.1, 40, clock)
advance(1)
assert by_steps.add_evaluation(0.91, 45, clock)        # the first to reach 0.9
assert not by_steps.add_evaluation(0.99, 50, clock)    # later ones do not count again
assert by_steps.reached == dict(accuracy=0.91, training_s=17, evaluation_s=4, steps=45, epochs=4.5), by_steps.reached
assert by_steps.best == 0.99 and by_steps.final == 0.99
fields = by_steps.summary_fields()
assert fields == dict(target_acc=0.9, target_reached=True, time_to_target_s=17, target_epochs=4.5, target_steps=45)
line = by_steps.summary_line(5)
assert line == "time to 90.00% test accuracy: 17.0 s of training, 4.50 epochs (45 steps); evaluations took 4.0 s more", line
missed = AccuracyTracker(1, 0, 3, 0.9, 10)
missed.add_evaluation(0.4, 10, clock)
assert missed.summary_line(3) == "target 90.00% test accuracy not reached in 3 epochs (best 40.00%)"
assert missed.summary_fields()["target_reached"] is False and AccuracyTracker(1, 0, 3, None, 10).summary_line(3) == ""
try:
    AccuracyTracker(0, 0, 3, 0.9, 10)
    raise AssertionError("a target with no evaluation was accepted")
except ValueError as e:
    assert "--target-accuracy needs evaluations" in str(e)
PY
echo "ok: the clock's pauses, the evaluation schedule, and the time to target"
