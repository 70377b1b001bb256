#!/usr/bin/env python3
"""Is cutrain computing what PyTorch computes? Three checks across the programs.

    check_parity.py grads TORCH.safetensors CUTRAIN.safetensors [--rtol 1e-3] [--fp64 FP64.safetensors]
        The first step's loss and gradients, dumped by both programs from the same initial weights on the
        same fixed batch (--dump-first-step): per tensor, relative error |cutrain - torch|_2 / |torch|_2
        must stay within --rtol. That asks more than fp32 can give where batch norm's backward cancels
        (PyTorch's own fp32 gradients can be 4e-3 off its float64 ones on a small batch); so with --fp64,
        both are measured against the float64 step and cutrain passes when its error is within
        max(rtol, slack x PyTorch's). Needs numpy only.
    check_parity.py steps INIT --torch M W --twin M W --cutrain M W [--slack 4]
        N training steps of both programs from the same initial weights INIT on the same batches
        (pytorch_reference.py --cutrain-augment --log-every 1 --export-final W; cutrain train --init-from INIT
        --log-every 1 --save, its last checkpoint as W): the loss of every step (the metrics M) and every tensor
        of the final state_dict. Two correct fp32 programs drift apart step by step (batch norm's backward
        cancels, so fp32 gradients are only good to about 1e-3, and training amplifies that), so the yardstick
        is a twin, PyTorch itself in another memory layout (--channels-last: other kernels, other rounding): at
        step t cutrain's loss may differ from PyTorch's by up to --slack times the most the twin differed by
        in steps 1..t (or 1e-4 of the loss: in the first steps the twin, sharing most of PyTorch's kernels,
        hardly moves), and each final tensor's update (final - INIT) by up to --slack times the twin's relative
        difference (or 1e-4); integer tensors (num_batches_tracked) must be equal. Needs numpy only.
    check_parity.py checkpoint --data DIR --checkpoint PATH --cutrain-acc PERCENT [--stem S] [--tolerance PP]
                               [--tta flip]
        A cutrain checkpoint loaded into torchvision's resnet18 (load_state_dict strict=True) and evaluated
        by PyTorch in fp32 must score the test accuracy `cutrain eval` printed, within --tolerance
        percentage points; with --tta flip, both programs' test-time augmentation. Needs torch.

With --json FILE each check adds {"name", "passed", "detail", ...} under its key to FILE (created if
absent), which summarize.py --parity prints under the table. Exit status 0 when the check passes.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402

PROG = "check_parity.py"


def relative_error(x, reference):
    """|x - reference|_2 / |reference|_2, in float64."""
    import numpy as np
    x, reference = x.astype(np.float64), reference.astype(np.float64)
    return float(np.linalg.norm(x - reference) / max(np.linalg.norm(reference), 1e-30))


def load_matching(path, reference, reference_path):
    """A dump whose tensor names and shapes are the reference's; ValueError naming what differs."""
    import safetensors_io
    tensors = safetensors_io.load(path)
    missing, extra = sorted(set(reference) - set(tensors)), sorted(set(tensors) - set(reference))
    if missing or extra:
        raise ValueError(f"{path}: tensors differ from {reference_path}: missing {missing[:4]}, extra {extra[:4]}")
    for name, t in tensors.items():
        if t.shape != reference[name].shape:
            raise ValueError(f"{path}: {name} has shape {list(t.shape)}, "
                             f"{reference_path} {list(reference[name].shape)}")
    return tensors


def compare_grads(torch_path, cutrain_path, rtol, fp64_path=None, slack=2.0):
    """-> (passed, detail, extra results). Without fp64_path each tensor of cutrain's dump must be within rtol
    of PyTorch's. With it, both fp32 dumps are measured against the float64 step, and cutrain's error may
    reach max(rtol, slack x PyTorch's own): what fp32 arithmetic allows for this step and batch."""
    import safetensors_io
    ref = safetensors_io.load(torch_path)
    got = load_matching(cutrain_path, ref, torch_path)
    direct = {name: relative_error(got[name], ref[name]) for name in ref}
    if fp64_path is None:
        errors, limits, extra = direct, {name: rtol for name in ref}, {}
    else:
        exact = load_matching(fp64_path, ref, torch_path)
        torch_errors = {name: relative_error(ref[name], exact[name]) for name in ref}
        errors = {name: relative_error(got[name], exact[name]) for name in ref}
        limits = {name: max(rtol, slack * torch_errors[name]) for name in ref}
        extra = {"torch_fp32_vs_fp64": torch_errors, "cutrain_vs_torch": direct}
    failing = [name for name in ref if not errors[name] <= limits[name]]  # NaN fails too
    worst = max(ref, key=lambda name: errors[name] / limits[name])
    yardstick = "fp64" if fp64_path else "PyTorch fp32"
    detail = (f"loss {float(ref['loss'][0]):.6f} vs {float(got['loss'][0]):.6f}; {len(failing)} of {len(ref)} "
              f"tensors over their limit; worst {worst}: error {errors[worst]:.2e} against {yardstick}, "
              f"limit {limits[worst]:.2e}")
    if fp64_path:
        detail += f" (PyTorch fp32's own {extra['torch_fp32_vs_fp64'][worst]:.2e})"
    return not failing, detail, {"relative_errors": errors, "limits": limits, **extra}


def step_losses(path):
    """A metrics file's step records -> losses indexed by global step 1..N; each step must have its own line."""
    losses = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "step":
                losses[r["global_step"]] = r["loss"]
    if not losses or sorted(losses) != list(range(1, len(losses) + 1)):
        raise ValueError(f"{path}: not one step line per step from step 1 (train with --log-every 1)")
    return [losses[t] for t in range(1, len(losses) + 1)]


def compare_steps(init_path, torch_run, twin_run, cutrain_run, slack=4.0, loss_floor=1e-4, update_floor=1e-4):
    """-> (passed, detail, extra results). Each run is (metrics path, final weights path). The twin is PyTorch in
    another layout: how far two correct fp32 programs drift apart on these steps. Per step, |cutrain - torch| of
    the loss must stay within max(slack x the twin's largest difference so far, loss_floor x |loss|); per tensor,
    |cutrain - torch| / |torch - init| of the final state within max(slack x the twin's, update_floor); the integer
    tensors (num_batches_tracked) must be equal."""
    import numpy as np
    import safetensors_io
    losses = {name: step_losses(run[0]) for name, run in
              (("torch", torch_run), ("twin", twin_run), ("cutrain", cutrain_run))}
    if len({len(v) for v in losses.values()}) != 1:
        raise ValueError(f"the runs logged different numbers of steps: " +
                         ", ".join(f"{k} {len(v)}" for k, v in losses.items()))
    ref = np.array(losses["torch"])
    twin_gap, gap = np.abs(np.array(losses["twin"]) - ref), np.abs(np.array(losses["cutrain"]) - ref)
    loss_limits = np.maximum(slack * np.maximum.accumulate(twin_gap), loss_floor * np.abs(ref))
    bad_steps = [t + 1 for t in range(len(ref)) if not gap[t] <= loss_limits[t]]  # NaN fails too
    worst_step = int(np.argmax(gap / loss_limits))

    init = safetensors_io.load(init_path)
    torch_w = load_matching(torch_run[1], init, init_path)
    twin_w = load_matching(twin_run[1], init, init_path)
    cutrain_w = load_matching(cutrain_run[1], init, init_path)
    errors, limits, twin_errors = {}, {}, {}
    for name, w in torch_w.items():
        if not np.issubdtype(w.dtype, np.floating):
            errors[name], limits[name] = float(not np.array_equal(cutrain_w[name], w)), 0.5  # must be equal
            continue
        update = w.astype(np.float64) - init[name]  # relative to what the steps changed, not to the weights
        twin_errors[name] = relative_error(twin_w[name] - init[name].astype(np.float64), update)
        errors[name] = relative_error(cutrain_w[name] - init[name].astype(np.float64), update)
        limits[name] = max(slack * twin_errors[name], update_floor)
    bad_tensors = [name for name in errors if not errors[name] <= limits[name]]
    worst = max(errors, key=lambda name: errors[name] / limits[name])
    detail = (f"{len(ref)} steps: {len(bad_steps)} losses over their limit, worst step {worst_step + 1}: "
              f"{losses['cutrain'][worst_step]:.7f} vs {ref[worst_step]:.7f} (limit {loss_limits[worst_step]:.1e}, "
              f"twin {twin_gap[worst_step]:.1e}); {len(bad_tensors)} of {len(errors)} final tensors over their limit, "
              f"worst {worst}: update off by {errors[worst]:.2e}, limit {limits[worst]:.2e}")
    if worst in twin_errors:
        detail += f" (twin {twin_errors[worst]:.2e})"
    extra = {"losses": losses, "loss_limits": loss_limits.tolist(), "update_errors": errors, "update_limits": limits,
             "twin_update_errors": twin_errors}
    return not bad_steps and not bad_tensors, detail, extra


def checkpoint_accuracy(data, checkpoint, stem, tta="none"):
    """Test accuracy (fraction) of a safetensors checkpoint loaded strictly into torchvision's resnet18 (at the
    checkpoint's width, from conv1's output channels), scored by the PyTorch reference's evaluate()."""
    import contextlib

    import torch

    import cifar10
    import reference_trainer
    import safetensors_io
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    env = reference_trainer.Env("auto")
    conv1 = safetensors_io.load(checkpoint).get("conv1.weight")
    model = reference_trainer.build_model(stem, width=64 if conv1 is None else conv1.shape[0])
    reference_trainer.load_weights(model, checkpoint)
    model.to(env.device)
    test_x, test_y = cifar10.load_split(data, train=False)
    x = torch.from_numpy(cifar10.normalize(test_x)).to(env.device)
    y = torch.from_numpy(test_y).to(env.device)
    return reference_trainer.evaluate(model, x, y, env, contextlib.nullcontext, tta)


def record(json_path, key, result):
    if not json_path:
        return
    results = {}
    if os.path.exists(json_path):
        with open(json_path) as f:
            results = json.load(f)
    results[key] = result
    with open(json_path, "w") as f:
        json.dump(results, f, indent=2)


def main(argv=None):
    cli.use_project_python()
    p = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="check", required=True, parser_class=cli.Parser)
    g = sub.add_parser("grads", help="first-step loss and gradients")
    g.add_argument("torch_dump")
    g.add_argument("cutrain_dump")
    g.add_argument("--rtol", type=float, default=1e-3, help="relative error allowed per tensor (default 1e-3)")
    g.add_argument("--fp64", metavar="PATH", help="the float64 step (pytorch_reference.py --dump-fp64) as yardstick")
    g.add_argument("--slack", type=float, default=2.0,
                   help="with --fp64: cutrain may err up to this many times PyTorch's fp32 error (default 2)")
    t = sub.add_parser("steps", help="the losses and final weights of N training steps")
    t.add_argument("init", help="the initial weights both programs started from")
    for run in ("torch", "twin", "cutrain"):
        t.add_argument(f"--{run}", nargs=2, required=True, metavar=("METRICS", "WEIGHTS"))
    t.add_argument("--slack", type=float, default=4.0,
                   help="cutrain may drift from PyTorch up to this many times the twin's drift (default 4)")
    c = sub.add_parser("checkpoint", help="a cutrain checkpoint's accuracy in torchvision")
    c.add_argument("--data", required=True, metavar="DIR")
    c.add_argument("--checkpoint", required=True, metavar="PATH")
    c.add_argument("--cutrain-acc", required=True, type=float, metavar="PERCENT", help="what `cutrain eval` printed")
    c.add_argument("--stem", choices=["cifar", "imagenet"], default="cifar")
    c.add_argument("--tta", choices=["none", "flip"], default="none", help="test-time augmentation, as cutrain eval's")
    c.add_argument("--tolerance", type=float, default=0.3, metavar="PP", help="percentage points (default 0.3)")
    for s in (g, t, c):
        s.add_argument("--json", metavar="FILE", help="add this check's result to FILE")
    args = p.parse_args(argv)

    if args.check == "grads":
        key, name = "first_step", "first-step loss and gradients (fp32)"
    elif args.check == "steps":
        key, name = "steps", "losses and final weights of N steps (fp32)"
    elif args.tta == "none":
        key, name = "checkpoint", "cutrain checkpoint in torchvision"
    else:
        key, name = "checkpoint_tta", f"cutrain checkpoint in torchvision, --tta {args.tta}"
    try:
        if args.check == "grads":
            passed, detail, extra = compare_grads(args.torch_dump, args.cutrain_dump, args.rtol, args.fp64,
                                                  args.slack)
        elif args.check == "steps":
            passed, detail, extra = compare_steps(args.init, args.torch, args.twin, args.cutrain, args.slack)
        else:
            acc = 100 * checkpoint_accuracy(args.data, args.checkpoint, args.stem, args.tta)
            passed = abs(acc - args.cutrain_acc) <= args.tolerance
            detail = (f"torchvision {acc:.2f}% vs cutrain eval {args.cutrain_acc:.2f}%, "
                      f"tolerance {args.tolerance} points")
            extra = {"torch_acc": acc, "cutrain_acc": args.cutrain_acc}
    except ImportError as e:
        record(args.json, key, {"name": name, "passed": False, "detail": f"not run: {e}"})
        cli.fail(PROG, f"{args.check}: {e}")
    except (ValueError, OSError) as e:
        record(args.json, key, {"name": name, "passed": False, "detail": str(e)})
        cli.fail(PROG, str(e))
    record(args.json, key, {"name": name, "passed": passed, "detail": detail, **extra})
    print(f"{name}: {detail} -> {'PASS' if passed else 'FAIL'}")
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
