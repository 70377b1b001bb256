#!/usr/bin/env python3
"""The reference recipe in PyTorch, to measure cutrain against: ResNet-18 on CIFAR-10 with DDP.

    torchrun --nproc-per-node 8 bench/pytorch_reference.py --data cifar-10-batches-bin --amp bf16 --channels-last
    python3 bench/pytorch_reference.py --data DIR            # one process, no torchrun needed

The same data files and metrics lines as `cutrain train`, its flag names where the two share a setting, and
the same clock (time_to_accuracy.py): images/s leave out evaluation and the epoch-start wait, and the first
logged interval is the warm-up. --amp, --channels-last, --compile, --data-on-gpu, --cutrain-augment, --export-init,
--export-final and --dump-fp64 are this script's own. The flags are parsed before torch is imported, so --help and
a bad flag answer on machines without torch; the training itself is in reference_trainer.py.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402  (this folder's modules, found through the line above)
import lr_schedule  # noqa: E402

PROG = "pytorch_reference.py"


def parse_args(argv=None):
    p = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--data", metavar="DIR", help="CIFAR-10 binary folder (data_batch_*.bin, test_batch.bin)")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=256, help="per process, as cutrain's")
    p.add_argument("--lr", type=float, default=0.002)
    p.add_argument("--lr-schedule", choices=lr_schedule.KINDS, default="constant",
                   help="the learning rate per step, as cutrain's --lr-schedule (kernels/lr_schedule.h)")
    p.add_argument("--warmup-epochs", type=float, default=0, help="linear warm-up, in epochs, as cutrain's")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--nesterov", action=argparse.BooleanOptionalAction, default=True,
                   help="Nesterov momentum (default on)")
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--norm-weight-decay", type=cli.number_in(0, 1), metavar="WD",
                   help="weight decay of batch norm's weights and biases alone, torchvision's set_weight_decay "
                        "(default: --weight-decay's; fc.bias keeps --weight-decay), as cutrain's")
    p.add_argument("--clip-grad-norm", type=cli.number_in(0, 1e6), default=0, metavar="MAX",
                   help="torch.nn.utils.clip_grad_norm_ to this 2-norm after backward (after DDP's average), "
                        "before the step, as cutrain's (default 0: no clipping)")
    p.add_argument("--lr-milestones", type=cli.number_list(0, 1, 1, lr_schedule.MAX_MILESTONES, increasing=True),
                   metavar="M,M", help="where --lr-schedule step multiplies the rate by --lr-gamma, as fractions "
                                      "of the run's steps (default 0.5,0.75), as cutrain's")
    p.add_argument("--lr-gamma", type=cli.number_in(0, 1), metavar="G",
                   help="the factor of --lr-schedule step at each milestone (default 0.1)")
    p.add_argument("--label-smoothing", type=cli.number_in(0, 1), default=0, metavar="E",
                   help="nn.CrossEntropyLoss's label_smoothing (default 0)")
    p.add_argument("--model-ema", action=argparse.BooleanOptionalAction, default=False,
                   help="torchvision's ExponentialMovingAverage of the weights and batch norm's statistics, "
                        "updated and evaluated as its reference script does (default off); --export-final also "
                        "writes it, as PATH's .ema.safetensors")
    p.add_argument("--model-ema-steps", type=cli.number_in(1, 1 << 30, integer=True), metavar="N",
                   help="update the average after each batch of an epoch whose index (from 0) is a multiple of N "
                        "(default 32)")
    p.add_argument("--model-ema-decay", type=cli.number_in(0, 1), metavar="D",
                   help="the decay before torchvision's adjustment to the world size, batch size, "
                        "--model-ema-steps and --epochs (default 0.99998)")
    p.add_argument("--workers", type=int, default=4, help="DataLoader worker processes per rank")
    p.add_argument("--normalize-mean", type=cli.number_list(0, 1, 3, 3), metavar="R,G,B",
                   help="the mean subtracted from pixels in [0, 1] (default: CIFAR-10's), as cutrain's")
    p.add_argument("--normalize-std", type=cli.number_list(0.001, 1, 3, 3), metavar="R,G,B",
                   help="the std they are then divided by (default: CIFAR-10's), as cutrain's")
    p.add_argument("--stem", choices=["cifar", "imagenet"], default="cifar",
                   help="cifar: conv1 3x3 stride 1 and no max-pool; imagenet: torchvision's own")
    p.add_argument("--width", type=int, default=64,
                   help="base width of ResNet-18: channels W, 2W, 4W, 8W, as cutrain's (64 is torchvision's)")
    p.add_argument("--init-from", metavar="PATH", help="start from these weights (safetensors, torchvision names)")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps in all (0: no limit)")
    p.add_argument("--eval-every", type=int, default=1, help="test accuracy every E epochs (and at the end)")
    p.add_argument("--eval-every-steps", type=int, default=0, metavar="N",
                   help="test accuracy every N steps (and at the end) instead of every E epochs")
    p.add_argument("--target-accuracy", type=float, metavar="A",
                   help="stop at the first evaluation whose test accuracy reaches A (a fraction, e.g. 0.94) and "
                        "report the training time it took")
    p.add_argument("--tta", choices=["none", "flip"], default="none",
                   help="test-time augmentation: flip scores the mean of the logits of the image and its mirror")
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--metrics", metavar="FILE", help="JSON lines, cutrain's schema (rank 0 writes)")
    p.add_argument("--amp", choices=["none", "bf16"], default="none", help="bf16 autocast")
    p.add_argument("--channels-last", action="store_true", help="NHWC model and inputs")
    p.add_argument("--compile", nargs="?", const="default", choices=["default", "max-autotune"],
                   help="torch.compile the model, in this mode (default: default)")
    p.add_argument("--data-on-gpu", action="store_true",
                   help="uint8 dataset on the GPU, crop/flip/normalize there (no DataLoader)")
    p.add_argument("--export-init", metavar="PATH", help="write the initial weights (torchvision names)")
    p.add_argument("--export-final", metavar="PATH", help="write the weights after training (torchvision names)")
    p.add_argument("--cutrain-augment", action="store_true",
                   help="crop and flip as cutrain draws them (bench/augment_draws.py), in cutrain's sampler order: "
                        "both programs train on the same batches (the multi-step parity check)")
    p.add_argument("--dump-first-step", metavar="PATH",
                   help="write the loss and gradients of one fp32 step on the first batch-size train "
                        "images (normalized only), then exit")
    p.add_argument("--dump-fp64", metavar="PATH",
                   help="with --dump-first-step: the same step in float64 too, the yardstick for both programs")
    args = p.parse_args(argv)
    # The step schedule's and the average's settings would change nothing without them: refused, as cutrain does.
    step, ema = (args.lr_schedule == "step", "to --lr-schedule step"), (args.model_ema, "with --model-ema")
    for flag, (applies, where), default in (("lr_milestones", step, (0.5, 0.75)), ("lr_gamma", step, 0.1),
                                            ("model_ema_steps", ema, 32), ("model_ema_decay", ema, 0.99998)):
        if getattr(args, flag) is None:
            setattr(args, flag, default)
        elif not applies:
            p.error(f"--{flag.replace('_', '-')}: applies {where} only")
    for flag in ("epochs", "batch_size", "log_every", "width"):
        if getattr(args, flag) <= 0:
            p.error(f"--{flag.replace('_', '-')} must be positive")
    for flag in ("max_steps", "workers", "eval_every", "eval_every_steps", "warmup_epochs"):
        if getattr(args, flag) < 0:
            p.error(f"--{flag.replace('_', '-')} must not be negative")
    if args.target_accuracy is not None and not 0 < args.target_accuracy <= 1:
        p.error("--target-accuracy must be a fraction in (0, 1], e.g. 0.94")
    if args.target_accuracy is not None and not (args.eval_every or args.eval_every_steps):
        p.error("--target-accuracy needs evaluations: --eval-every E or --eval-every-steps N")
    if args.cutrain_augment and args.data_on_gpu:
        p.error("--cutrain-augment and --data-on-gpu are two different input pipelines: choose one")
    if args.dump_fp64 and not args.dump_first_step:
        p.error("--dump-fp64 goes with --dump-first-step")
    if args.data is None and not (args.export_init and not args.dump_first_step):
        p.error("--data DIR is required (only --export-init alone needs no data)")
    return args


def main():
    cli.use_project_python()
    args = parse_args()
    try:
        import torch
        import torchvision  # noqa: F401
    except ImportError as e:
        cli.fail(PROG, f"torch not importable: {e}")
    if args.device == "cuda" and not torch.cuda.is_available():
        cli.fail(PROG, "no CUDA device: torch.cuda.is_available() is False")
    import reference_trainer
    try:
        reference_trainer.run(args)
    except (ValueError, OSError) as e:  # bad data or paths: one line
        cli.fail(PROG, str(e))


if __name__ == "__main__":
    main()
