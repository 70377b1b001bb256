"""torch_step.py: PyTorch's milliseconds per training step of ResNet-18 (forward + backward + SGD) on a fixed
synthetic batch, after a warm-up: the counterpart of `cutrain bench-step --device cpu`, the same model
(reference_trainer.build_model), batch and SGD, on the threads given (torch.set_num_threads)."""
import argparse
import time

import torch
import torch.nn.functional as F

from reference_trainer import build_model


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--stem", choices=["cifar", "imagenet"], default="cifar")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model(args.stem, width=args.width).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
    x = torch.randn(args.batch_size, 3, 32, 32)
    y = torch.randint(0, 10, (args.batch_size,))

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(args.warmup):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    seconds = time.perf_counter() - start
    print(f"torch {torch.__version__}: {1000 * seconds / args.steps:.2f} ms/step ({args.steps} steps after "
          f"{args.warmup} warm-up, {torch.get_num_threads()} threads; last loss {loss.item():.4f})")


if __name__ == "__main__":
    main()
