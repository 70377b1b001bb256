#!/usr/bin/env python3
"""Is cutrain computing what PyTorch computes? Two checks across the programs.

    check_parity.py grads TORCH.safetensors CUTRAIN.safetensors [--rtol 1e-3] [--json FILE]
        The first step's loss and gradients, dumped by both programs from the same initial weights on the
        same fixed batch (--dump-first-step): per tensor, relative error |cutrain - torch|_2 / |torch|_2
        must stay within --rtol. Needs numpy only.
    check_parity.py checkpoint --data DIR --checkpoint PATH --cutrain-acc PERCENT [--stem S] [--tolerance PP]
        A cutrain checkpoint loaded into torchvision's resnet18 (load_state_dict strict=True) and evaluated
        by PyTorch in fp32 must score the test accuracy `cutrain eval` printed, within --tolerance
        percentage points. Needs torch.

With --json FILE each check adds {"name", "passed", "detail", ...} under its key to FILE (created if
absent), which summarize.py --parity prints under the table. Exit status 0 when the check passes.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402

PROG = "check_parity.py"


def compare_grads(torch_path, cutrain_path, rtol):
    """-> (passed, detail, per-tensor relative errors). Raises ValueError on unreadable or mismatched files."""
    import numpy as np
    import safetensors_io
    ref, got = safetensors_io.load(torch_path), safetensors_io.load(cutrain_path)
    missing = sorted(set(ref) - set(got))
    extra = sorted(set(got) - set(ref))
    if missing or extra:
        raise ValueError(f"{cutrain_path}: tensors differ from {torch_path}: missing {missing[:4]}, extra {extra[:4]}")
    errors = {}
    for name in sorted(ref):
        a, b = ref[name].astype(np.float64), got[name].astype(np.float64)
        if a.shape != b.shape:
            raise ValueError(f"{cutrain_path}: {name} has shape {list(b.shape)}, PyTorch's {list(a.shape)}")
        errors[name] = float(np.linalg.norm(b - a) / max(np.linalg.norm(a), 1e-30))
    worst = sorted(errors, key=errors.get, reverse=True)[:3]
    passed = all(e <= rtol for e in errors.values())  # NaN fails too
    detail = (f"loss {float(ref['loss'][0]):.6f} vs {float(got['loss'][0]):.6f}; max relative error "
              f"{errors[worst[0]]:.2e} ({worst[0]}) over {len(errors)} tensors, limit {rtol:.0e}")
    return passed, detail, errors


def checkpoint_accuracy(data, checkpoint, stem):
    """Test accuracy (fraction) of a safetensors checkpoint loaded strictly into torchvision's resnet18."""
    import contextlib

    import torch

    import cifar10
    import reference_trainer
    import safetensors_io
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    env = reference_trainer.Env("auto")
    model = reference_trainer.build_model(stem)
    state = {k: torch.from_numpy(v) for k, v in safetensors_io.load(checkpoint).items()}
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{checkpoint}: not torchvision's names: {len(missing)} missing {missing[:3]}, "
                         f"{len(unexpected)} unexpected {unexpected[:3]}")
    for k, v in expected.items():
        if state[k].shape != v.shape or state[k].dtype != v.dtype:
            raise ValueError(f"{checkpoint}: {k} is {state[k].dtype} {list(state[k].shape)}, "
                             f"torchvision's {v.dtype} {list(v.shape)}")
    model.load_state_dict(state, strict=True)
    model.to(env.device)
    test_x, test_y = cifar10.load_split(data, train=False)
    x = torch.from_numpy(cifar10.normalize(test_x)).to(env.device)
    y = torch.from_numpy(test_y).to(env.device)
    return reference_trainer.evaluate(model, x, y, env, contextlib.nullcontext)


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
    g.add_argument("--rtol", type=float, default=1e-3)
    c = sub.add_parser("checkpoint", help="a cutrain checkpoint's accuracy in torchvision")
    c.add_argument("--data", required=True, metavar="DIR")
    c.add_argument("--checkpoint", required=True, metavar="PATH")
    c.add_argument("--cutrain-acc", required=True, type=float, metavar="PERCENT", help="what `cutrain eval` printed")
    c.add_argument("--stem", choices=["cifar", "imagenet"], default="cifar")
    c.add_argument("--tolerance", type=float, default=0.3, metavar="PP", help="percentage points (default 0.3)")
    for s in (g, c):
        s.add_argument("--json", metavar="FILE", help="add this check's result to FILE")
    args = p.parse_args(argv)

    if args.check == "grads":
        key, name = "first_step", "first-step loss and gradients (fp32)"
    else:
        key, name = "checkpoint", "cutrain checkpoint in torchvision"
    try:
        if args.check == "grads":
            passed, detail, errors = compare_grads(args.torch_dump, args.cutrain_dump, args.rtol)
            extra = {"relative_errors": errors}
        else:
            acc = 100 * checkpoint_accuracy(args.data, args.checkpoint, args.stem)
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
