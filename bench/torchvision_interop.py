#!/usr/bin/env python3
"""cutrain's checkpoints in torchvision and back, with the `safetensors` package, as a user's code would do it.

    torchvision_interop.py evaluate CHECKPOINT --data DIR [--batch-size B]
        Loads a cutrain checkpoint into torchvision's resnet18 with load_state_dict(strict=True) and prints its
        test accuracy on the CIFAR-10 binary folder DIR, through torchvision's transforms.
    torchvision_interop.py convert STATE_DICT.pth OUT.safetensors
        Writes a torchvision resnet18 state_dict (torch.save of model.state_dict()) as a cutrain checkpoint,
        which `cutrain eval --checkpoint` and `cutrain train --init-from` read.

In your own code:

    import torchvision_interop
    model = torchvision_interop.load_cutrain_checkpoint("runs/c10/checkpoint-00003920.safetensors")
    batch = torch.stack([torchvision_interop.transform()(image) for image in pil_images])

A cutrain checkpoint is torchvision's state_dict under its own names, shapes and dtypes (float32 tensors,
num_batches_tracked int64, convolution weights OIHW), in a safetensors file whose metadata says
{"format": "cutrain resnet18", "stem", "num_classes", "width"} (app/checkpoint_folder.cpp). The model it fits is
torchvision.models.resnet18(num_classes=K), with two edits for the cifar stem, the default (conv1 3x3 with
stride 1 and padding 1, and no max-pool):

    model.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = torch.nn.Identity()

At a --width W other than 64, the stages have W, 2W, 4W and 8W channels (torchvision's own blocks, built
narrower). The inputs are normalised as cutrain normalises them in training and evaluation: ToTensor, then
Normalize(mean=(0.4914, 0.4822, 0.4465), std=(0.2023, 0.1994, 0.2010)), CIFAR-10's per-channel statistics.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402  (this folder's modules, found through the line above; the others, which need numpy
             # or torch, are imported where used, so that --help and a bad flag answer without them)

PROG = "torchvision_interop.py"
FORMAT = "cutrain resnet18"  # the metadata's "format", app/checkpoint_folder.cpp's model_metadata


def transform():
    """ToTensor, then Normalize with CIFAR-10's per-channel mean and std: the inputs cutrain's model expects."""
    import torchvision.transforms as T
    import cifar10
    return T.Compose([T.ToTensor(), T.Normalize(cifar10.MEAN, cifar10.STD)])


def config_of(state):
    """(stem, width, num_classes) of the resnet18 whose state_dict (name -> tensor) this is, as cutrain
    reads them: conv1's kernel gives the stem, its rows the width, fc's rows the classes."""
    if "conv1.weight" not in state or "fc.weight" not in state:
        raise ValueError("not a resnet18 state_dict: no conv1.weight or fc.weight")
    conv1 = tuple(state["conv1.weight"].shape)
    if len(conv1) != 4 or conv1[2] not in (3, 7):
        raise ValueError(f"conv1.weight has shape {list(conv1)}: neither stem (3x3 cifar, 7x7 imagenet)")
    return ("imagenet" if conv1[2] == 7 else "cifar"), conv1[0], tuple(state["fc.weight"].shape)[0]


def torchvision_resnet18(stem, width=64, num_classes=10):
    """torchvision's resnet18 for cutrain's stem and width (reference_trainer.build_model: the same model
    the PyTorch reference trains)."""
    import reference_trainer
    return reference_trainer.build_model(stem, num_classes=num_classes, width=width)


def load_cutrain_checkpoint(path):
    """A cutrain checkpoint -> torchvision's resnet18 holding it, in eval mode; strict=True, so every name
    and shape must match."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    try:
        state = load_file(path)
    except SafetensorError as error:
        raise ValueError(f"{path}: not a safetensors file ({error}); a torchvision .pth goes through "
                         f"`{PROG} convert` first") from None
    model = torchvision_resnet18(*config_of(state))
    model.load_state_dict(state, strict=True)
    return model.eval()


def save_cutrain_checkpoint(state, path):
    """A torchvision resnet18 state_dict -> a cutrain checkpoint at `path`."""
    import torch
    from safetensors.torch import save_file
    stem, width, num_classes = config_of(state)
    tensors = {}
    for name, t in state.items():
        t = t.detach().cpu().contiguous()
        tensors[name] = t.to(torch.int64) if name.endswith("num_batches_tracked") else t.to(torch.float32)
    save_file(tensors, path, metadata={"format": FORMAT, "stem": stem, "num_classes": str(num_classes),
                                       "width": str(width)})


def evaluate(model, folder, batch_size=500):
    """Top-1 accuracy of `model` on the test split of a CIFAR-10 binary folder, through transform()."""
    import torch
    from PIL import Image
    import cifar10
    images, labels = cifar10.load_split(folder, train=False)
    to_input = transform()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(labels), batch_size):
            batch = torch.stack([to_input(Image.fromarray(x)) for x in images[start:start + batch_size]])
            correct += int((model(batch).argmax(1).numpy() == labels[start:start + batch_size]).sum())
    return correct / len(labels)


def main():
    cli.use_project_python()
    p = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("evaluate", help="a cutrain checkpoint in torchvision: its test accuracy")
    e.add_argument("checkpoint")
    e.add_argument("--data", required=True, metavar="DIR", help="CIFAR-10 binary folder (test_batch.bin)")
    e.add_argument("--batch-size", type=int, default=500)
    c = sub.add_parser("convert", help="a torchvision state_dict (.pth) -> a cutrain checkpoint")
    c.add_argument("state_dict")
    c.add_argument("out")
    args = p.parse_args()
    try:
        import pickle
        import torch
        import safetensors  # noqa: F401
    except ImportError as error:
        cli.fail(PROG, f"{error.name} not importable: {error} (scripts/setup.sh --with-tests installs it)")
    try:
        if args.command == "evaluate":
            model = load_cutrain_checkpoint(args.checkpoint)
            stem, width, classes = config_of(model.state_dict())
            print(f"test accuracy: {100 * evaluate(model, args.data, args.batch_size):.2f}% "
                  f"(torchvision resnet18, {stem} stem, width {width}, {classes} classes)")
        else:
            try:
                state = torch.load(args.state_dict, map_location="cpu", weights_only=True)
            except (pickle.UnpicklingError, RuntimeError) as error:
                raise ValueError(f"{args.state_dict}: not a state_dict saved by torch.save "
                                 f"({str(error).splitlines()[0][:80]}...)") from None
            if not isinstance(state, dict):
                raise ValueError(f"{args.state_dict}: holds a {type(state).__name__}, not a state_dict")
            save_cutrain_checkpoint(state, args.out)
            print(f"{args.state_dict} -> {args.out} ({'%s stem, width %d, %d classes' % config_of(state)})")
    except (ValueError, OSError, RuntimeError) as error:  # a wrong file: one line
        cli.fail(PROG, " ".join(str(error).split())[:300])


if __name__ == "__main__":
    main()
