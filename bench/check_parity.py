#!/usr/bin/env python3
"""Is cutrain computing what PyTorch computes? Two checks across the programs.

    check_parity.py grads TORCH.safetensors CUTRAIN.safetensors [--rtol 1e-3] [--fp64 FP64.safetensors]
        The first step's loss and gradients, dumped by both programs from the same initial weights on the
        same fixed batch (--dump-first-step): per tensor, relative error |cutrain - torch|_2 / |torch|_2
        must stay within --rtol. That asks more than fp32 can give where batch norm's backward cancels
        (PyTorch's own fp32 gradients can be 4e-3 off its float64 ones on a small batch); so with --fp64,
        both are measured against the float64 step and cutrain passes when its error is within
        max(rtol, slack x PyTorch's). Needs numpy only.
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
    p = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="check", required=True, parser_class=cli.Parser)
    g = sub.add_parser("grads", help="first-step loss and gradients")
    g.add_argument("torch_dump")
    g.add_argument("cutrain_dump")
    g.add_argument("--rtol", type=float, default=1e-3, help="relative error allowed per tensor (default 1e-3)")
    g.add_argument("--fp64", metavar="PATH", help="the float64 step (pytorch_reference.py --dump-fp64) as yardstick")
    g.add_argument("--slack", type=float, default=2.0,
                   help="with --fp64: cutrain may err up to this many times PyTorch's fp32 error (default 2)")
    c = sub.add_parser("checkpoint", help="a cutrain checkpoint's accuracy in torchvision")
    c.add_argument("--data", required=True, metavar="DIR")
    c.add_argument("--checkpoint", required=True, metavar="PATH")
    c.add_argument("--cutrain-acc", required=True, type=float, metavar="PERCENT", help="what `cutrain eval` printed")
    c.add_argument("--stem", choices=["cifar", "imagenet"], default="cifar")
    c.add_argument("--tta", choices=["none", "flip"], default="none", help="test-time augmentation, as cutrain eval's")
    c.add_argument("--tolerance", type=float, default=0.3, metavar="PP", help="percentage points (default 0.3)")
    for s in (g, c):
        s.add_argument("--json", metavar="FILE", help="add this check's result to FILE")
    args = p.parse_args(argv)

    if args.check == "grads":
        key, name = "first_step", "first-step loss and gradients (fp32)"
    elif args.tta == "none":
        key, name = "checkpoint", "cutrain checkpoint in torchvision"
    else:
        key, name = "checkpoint_tta", f"cutrain checkpoint in torchvision, --tta {args.tta}"
    try:
        if args.check == "grads":
            passed, detail, extra = compare_grads(args.torch_dump, args.cutrain_dump, args.rtol, args.fp64,
                                                  args.slack)
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
