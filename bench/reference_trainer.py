"""The PyTorch side of the comparison: model, data, DDP training loop, metrics. Started by pytorch_reference.py.

Everything a careful PyTorch user would do, and nothing cutrain-specific:
- torchvision's resnet18; the CIFAR stem replaces conv1 by a 3x3 stride-1 convolution (initialised as
  torchvision initialises its convolutions) and the max-pool by Identity, so state_dict names match.
- DDP over NCCL (Gloo on the CPU) when started by torchrun; one plain process otherwise.
- Data: a DataLoader over PIL images with torchvision's transforms (the recipe), or, with --data-on-gpu,
  the uint8 dataset resident on the GPU and crop + flip + normalize as one gather on the GPU.
- Timing: the loss and accuracy are summed on the device and read back only every --log-every steps,
  so no step waits for the host; an interval's time runs from one such read-back to the next, on cutrain's
  clock (time_to_accuracy.py): evaluation and the epoch-start wait are left out.
- Schedule and evaluation as cutrain's: lr_schedule.py, --eval-every-steps, --target-accuracy, --tta flip.
- The options of torchvision's classification reference script that cutrain takes, as that script implements
  them: --norm-weight-decay (set_weight_decay), --clip-grad-norm (clip_grad_norm_), --label-smoothing
  (CrossEntropyLoss), --model-ema (ExponentialMovingAverage, evaluated beside the model).
"""
import copy
import json
import math
import os
import resource
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision
import torchvision.transforms as T
from PIL import Image
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import augment_draws
import cifar10
import lr_schedule
import safetensors_io
from time_to_accuracy import EPOCH_START, EVALUATION, AccuracyTracker, RunClock


# ---------------------------------------------------------------------------------------------- model

def build_model(stem, num_classes=cifar10.NUM_CLASSES, width=64):
    """torchvision's resnet18; at another base width W its stages are rebuilt with W, 2W, 4W, 8W channels by
    torchvision's own _make_layer and initialised as torchvision initialises them (cutrain's --width)."""
    model = torchvision.models.resnet18(num_classes=num_classes)
    if width != 64:
        model.inplanes = width
        model.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        model.bn1 = nn.BatchNorm2d(width)
        block = torchvision.models.resnet.BasicBlock
        model.layer1 = model._make_layer(block, width, 2)
        model.layer2 = model._make_layer(block, 2 * width, 2, stride=2)
        model.layer3 = model._make_layer(block, 4 * width, 2, stride=2)
        model.layer4 = model._make_layer(block, 8 * width, 2, stride=2)
        model.fc = nn.Linear(8 * width, num_classes)
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
    if stem == "cifar":
        model.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
        model.maxpool = nn.Identity()
    return model


def load_weights(model, path):
    """safetensors with torchvision's names (a cutrain checkpoint or --export-init file) -> `model`, strictly:
    every name, shape and dtype must match. Raises ValueError naming the file and the first mismatch."""
    state = {k: torch.from_numpy(v) for k, v in safetensors_io.load(path).items()}
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{path}: not torchvision's names: {len(missing)} missing {missing[:3]}, "
                         f"{len(unexpected)} unexpected {unexpected[:3]}")
    for k, v in expected.items():
        if state[k].shape != v.shape or state[k].dtype != v.dtype:
            raise ValueError(f"{path}: {k} is {state[k].dtype} {list(state[k].shape)}, "
                             f"the model's {v.dtype} {list(v.shape)}")
    model.load_state_dict(state, strict=True)


def export_weights(model, path):
    """state_dict -> safetensors, torchvision's names, shapes and dtypes (num_batches_tracked int64)."""
    safetensors_io.save({k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}, path)


# ----------------------------------------------------------------------------------------------- data

class AugmentedCifar(Dataset):
    """The recipe's training set: PIL image -> RandomCrop(32, 4) -> flip -> ToTensor -> Normalize(mean, std)."""

    def __init__(self, images, labels, mean, std):
        self.images, self.labels = images, labels
        self.transform = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
                                    T.Normalize(mean, std)])

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.transform(Image.fromarray(self.images[i])), int(self.labels[i])


class LoaderBatches:
    """The recipe's input pipeline: DataLoader worker processes, pinned memory, copies to the device."""

    def __init__(self, dataset, sampler, args, device):
        self.device = device
        self.loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                                 pin_memory=device.type == "cuda", drop_last=True,
                                 persistent_workers=args.workers > 0)

    def __call__(self):
        for x, y in self.loader:
            yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)


def gpu_augment(images, mean, std):
    """uint8 [B, 3, 32, 32] on the device -> float32 normalized batch, with the recipe's augmentation.

    Zero-pad 4, take the 32x32 window at a random (dy, dx) in [0, 8]^2, and mirror it with p = 0.5:
    out[b, c, i, j] = padded[b, c, dy_b + i, dx_b + (31 - j if flip_b else j)], all as one gather.
    """
    b, dev = images.shape[0], images.device
    padded = F.pad(images, (4, 4, 4, 4))
    dy = torch.randint(0, 9, (b, 1), device=dev)
    dx = torch.randint(0, 9, (b, 1), device=dev)
    flip = torch.rand(b, 1, device=dev) < 0.5
    j = torch.arange(32, device=dev)
    rows = dy + j
    cols = dx + torch.where(flip, 31 - j, j)
    batch = torch.arange(b, device=dev)[:, None, None, None]
    channel = torch.arange(3, device=dev)[None, :, None, None]
    crops = padded[batch, channel, rows[:, None, :, None], cols[:, None, None, :]]
    return (crops.float() / 255.0 - mean) / std


class ResidentBatches:
    """The fast CIFAR trainers' input pipeline: the uint8 dataset lives on the device; a batch is an index
    gather and gpu_augment, with no host work but the epoch's sampler order."""

    def __init__(self, images, labels, sampler, batch_size, device, mean, std):
        self.images = torch.from_numpy(images).to(device).permute(0, 3, 1, 2).contiguous()
        self.labels = torch.from_numpy(labels).to(device)
        self.sampler, self.batch_size, self.device = sampler, batch_size, device
        self.mean = torch.tensor(mean, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(std, device=device).view(1, 3, 1, 1)

    def __call__(self):
        order = torch.tensor(list(self.sampler), device=self.device)
        for start in range(0, len(order) - self.batch_size + 1, self.batch_size):  # last partial batch dropped
            idx = order[start:start + self.batch_size]
            yield gpu_augment(self.images[idx], self.mean, self.std), self.labels[idx]


class CutrainBatches:
    """The batches cutrain trains on, bit for bit (augment_draws.py): the same sampler order (torch's
    DistributedSampler, which cutrain's data/sampler.h follows) and cutrain's crop and flip draws, for the
    multi-step parity check. Numpy on the host, one batch at a time: a check's pace, not a benchmark's."""

    def __init__(self, images, labels, sampler, batch_size, seed, device, mean, std):
        self.images, self.labels = images, labels
        self.sampler, self.batch_size, self.seed, self.device = sampler, batch_size, seed, device
        self.mean, self.std = mean, std

    def __call__(self):
        order = np.fromiter(self.sampler, np.int64)
        for start in range(0, len(order) - self.batch_size + 1, self.batch_size):  # last partial batch dropped
            idx = order[start:start + self.batch_size]
            x = augment_draws.augment(self.images, idx, self.sampler.epoch, self.seed, self.mean, self.std)
            yield torch.from_numpy(x).to(self.device), torch.from_numpy(self.labels[idx]).to(self.device)


# ---------------------------------------------------------------------------------------- distributed

class Env:
    """torchrun's RANK / WORLD_SIZE / LOCAL_RANK, or one process when they are absent."""

    def __init__(self, device_flag):
        self.distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
        self.rank = int(os.environ.get("RANK", 0))
        self.world = int(os.environ.get("WORLD_SIZE", 1))
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        use_cuda = device_flag == "cuda" or (device_flag == "auto" and torch.cuda.is_available())
        self.device = torch.device("cuda", self.local_rank) if use_cuda else torch.device("cpu")
        if use_cuda:
            torch.cuda.set_device(self.device)
        if self.distributed:
            dist.init_process_group("nccl" if use_cuda else "gloo")

    def sum(self, t):
        if self.distributed:
            dist.all_reduce(t)
        return t

    def print(self, *a):
        if self.rank == 0:
            print(*a, flush=True)


class Metrics:
    """cutrain's JSON lines, written by rank 0 alone."""

    def __init__(self, path, env):
        self.file = open(path, "w") if path and env.rank == 0 else None

    def write(self, **record):
        if self.file:
            self.file.write(json.dumps({**record, "time": time.time()}) + "\n")  # when, as cutrain's records say
            self.file.flush()


# ------------------------------------------------------------------------------------- first-step dump

def dump_first_step(model, train_images, train_labels, batch_size, path, normalization, label_smoothing=0.0,
                    dtype=torch.float32):
    """Loss and gradients of one forward + backward (train-mode batch statistics, no update) on the first
    batch-size train images in file order, normalized only (normalization: (mean, std)), with the run's label
    smoothing: what `cutrain train --dump-first-step` writes, for a tensor-by-tensor comparison. fp32 without
    TF32; in float64 (a copy of the model) it is the yardstick that tells how far any fp32 computation of this
    step may stray (check_parity.py --fp64)."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    device = next(model.parameters()).device
    model = copy.deepcopy(model).to(dtype).train()
    n = min(batch_size, len(train_labels))
    x = torch.from_numpy(cifar10.normalize(train_images[:n], *normalization)).to(device, dtype)
    y = torch.from_numpy(train_labels[:n]).to(device)
    loss = nn.CrossEntropyLoss(label_smoothing=label_smoothing)(model(x), y)
    loss.backward()
    numpy_dtype = np.float64 if dtype == torch.float64 else np.float32
    tensors = {"loss": np.array([loss.item()], dtype=numpy_dtype)}
    for name, p in model.named_parameters():
        tensors["grad." + name] = p.grad.detach().cpu().numpy().astype(numpy_dtype)
    safetensors_io.save(tensors, path)
    print(f"first step ({str(dtype).removeprefix('torch.')}): loss {loss.item():.6f}, {len(tensors) - 1} gradients "
          f"-> {path}", flush=True)


# ------------------------------------------------------------------------------------------- training

def evaluate(model, test_x, test_y, env, amp, tta="none"):
    """Top-1 accuracy on the test set; rank r scores images r, r + world, ...; the counts are summed. With
    tta="flip" the prediction is the argmax of the mean of the logits of each image and its mirror."""
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=env.device)
    mine = torch.arange(env.rank, len(test_y), env.world, device=env.device)
    with torch.no_grad(), amp():
        for start in range(0, len(mine), 1024):
            idx = mine[start:start + 1024]
            x = test_x[idx]
            logits = model(x).float()
            if tta == "flip":
                logits = (logits + model(x.flip(3)).float()) / 2  # dim 3 is the width, also in channels_last
            correct += (logits.argmax(1) == test_y[idx]).sum()
    model.train()
    return env.sum(correct).item() / len(test_y)


def normalization(args):
    """(mean, std) of --normalize-mean and --normalize-std, CIFAR-10's where not given."""
    return args.normalize_mean or cifar10.MEAN, args.normalize_std or cifar10.STD


def ema_path_for(path):
    """"final.safetensors" -> "final.ema.safetensors": where --export-final's average goes, as cutrain names a
    checkpoint's (app/checkpoint_folder.h)."""
    return path.removesuffix(".safetensors") + ".ema.safetensors"


def set_weight_decay(model, weight_decay, norm_weight_decay=None):
    """torchvision's set_weight_decay (references/classification/utils.py) without its custom keys, which cutrain
    has no flags for: the parameters of normalization layers in a group of their own with norm_weight_decay
    when it is given, every other one in a group with weight_decay, in the model's order."""
    norm_classes = (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm,
                    nn.modules.instancenorm._InstanceNorm, nn.LocalResponseNorm)
    params = {"other": [], "norm": []}
    decays = {"other": weight_decay, "norm": norm_weight_decay}

    def add_params(module):
        for _, p in module.named_parameters(recurse=False):
            if p.requires_grad:
                norm = norm_weight_decay is not None and isinstance(module, norm_classes)
                params["norm" if norm else "other"].append(p)
        for child in module.children():
            add_params(child)

    add_params(model)
    return [{"params": params[key], "weight_decay": decays[key]} for key in params if params[key]]


class ExponentialMovingAverage(torch.optim.swa_utils.AveragedModel):
    """torchvision's (references/classification/utils.py): an AveragedModel of the parameters and the buffers,
    average = decay * average + (1 - decay) * model at each update_parameters, the first of which copies."""

    def __init__(self, model, decay, device="cpu"):
        def ema_avg(avg_model_param, model_param, num_averaged):
            return decay * avg_model_param + (1 - decay) * model_param

        super().__init__(model, device, ema_avg, use_buffers=True)


def model_ema_decay(world_size, batch_size, steps, epochs, decay):
    """The reference script's decay per update: --model-ema-decay adjusted to the run's shape, so that the
    average spans about the same share of the run whatever the world, batch, --model-ema-steps and epochs."""
    adjust = world_size * batch_size * steps / epochs
    alpha = min(1.0, (1.0 - decay) * adjust)
    return 1.0 - alpha


def run(args):
    env = Env(args.device)
    device = env.device
    torch.manual_seed(args.seed)
    model = build_model(args.stem, width=args.width)
    if args.init_from:
        load_weights(model, args.init_from)
    model = model.to(device)
    if args.export_init and env.rank == 0:
        export_weights(model, args.export_init)
        print(f"initial weights -> {args.export_init}", flush=True)
    if args.data is None:
        return
    train_x, train_y = cifar10.load_split(args.data, train=True)
    if args.dump_first_step:
        if env.rank == 0:
            step = (train_x, train_y, args.batch_size)
            dump_first_step(model, *step, args.dump_first_step, normalization(args), args.label_smoothing)
            if args.dump_fp64:
                dump_first_step(model, *step, args.dump_fp64, normalization(args), args.label_smoothing, torch.float64)
        return
    test_x, test_y = cifar10.load_split(args.data, train=False)
    ema = train(model, env, args, (train_x, train_y), (test_x, test_y))
    if args.export_final and env.rank == 0:
        export_weights(model, args.export_final)
        print(f"final weights -> {args.export_final}", flush=True)
        if ema is not None:  # the average beside them, named as cutrain names its checkpoint's
            export_weights(ema.module, ema_path_for(args.export_final))
            print(f"final average of the weights -> {ema_path_for(args.export_final)}", flush=True)
    if env.distributed:
        dist.destroy_process_group()


def train(model, env, args, train_set, test_set):
    """Trains `model` in place; returns the average of its weights with --model-ema, else None."""
    device = env.device
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    torch.backends.cudnn.benchmark = True
    model = model.to(memory_format=memory_format)
    net = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None) \
        if env.distributed else model
    if args.compile:
        net = torch.compile(net, mode=args.compile)
    parameters = set_weight_decay(model, args.weight_decay, args.norm_weight_decay)
    opt = torch.optim.SGD(parameters, lr=args.lr, momentum=args.momentum, nesterov=args.nesterov,
                          weight_decay=args.weight_decay)
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    ema = None
    if args.model_ema:  # of the model without DDP's wrapper, on its device, as the reference script's
        decay = model_ema_decay(env.world, args.batch_size, args.model_ema_steps, args.epochs, args.model_ema_decay)
        ema = ExponentialMovingAverage(model, decay, device=device)

    def amp():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp == "bf16")

    n_train = len(train_set[1])
    sampler = DistributedSampler(range(n_train), num_replicas=env.world, rank=env.rank, shuffle=True,
                                 seed=args.seed)
    steps_per_epoch = len(sampler) // args.batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"--batch-size {args.batch_size}: larger than this rank's {len(sampler)} train images")
    mean, std = normalization(args)
    if args.cutrain_augment:
        batches = CutrainBatches(*train_set, sampler, args.batch_size, args.seed, device, mean, std)
    elif args.data_on_gpu:
        batches = ResidentBatches(*train_set, sampler, args.batch_size, device, mean, std)
    else:
        batches = LoaderBatches(AugmentedCifar(*train_set, mean, std), sampler, args, device)
    test_x = torch.from_numpy(cifar10.normalize(test_set[0], mean, std)).to(device)
    test_x = test_x.contiguous(memory_format=memory_format)
    test_y = torch.from_numpy(test_set[1]).to(device)

    schedule_steps = args.epochs * steps_per_epoch  # the schedule spans --epochs, as cutrain's
    total_steps = min(schedule_steps, args.max_steps) if args.max_steps else schedule_steps
    warmup_steps = int(args.warmup_epochs * steps_per_epoch)
    epochs = -(-total_steps // steps_per_epoch)
    precision = "bf16" if args.amp == "bf16" else "fp32"
    print_banner(env, args, model, (n_train, len(test_y)), steps_per_epoch, total_steps)
    if ema is not None:  # cutrain's banner line
        env.print(f"  EMA of the weights: decay {decay:.9g} per update (--model-ema-decay {args.model_ema_decay:g}), "
                  f"every {args.model_ema_steps} step(s) of an epoch from its first")
    metrics = Metrics(args.metrics, env)
    images_per_step = args.batch_size * env.world
    tracker = AccuracyTracker(args.eval_every, args.eval_every_steps, epochs, args.target_accuracy, steps_per_epoch)
    global_step = warm_images = warm_seconds = 0
    pace_steps = pace_seconds = 0.0  # cutrain's RecentPace (Note [A recent ETA] in app/run_clock.h)
    warm = False  # the first logged interval is the warm-up, as in cutrain
    wall_start = time.perf_counter()
    clock = RunClock()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def evaluate_if_due(epoch, epoch_end):
        """(the test accuracy, the average's with --model-ema, else None) when an evaluation is due (None
        otherwise), measured off the training clock; the tracker learns whether the model reached the target."""
        if not tracker.due(epoch, epoch_end, global_step):
            return None
        sync()  # the steps so far are training time
        clock.pause(EVALUATION)
        start = time.perf_counter()
        accuracy = evaluate(model, test_x, test_y, env, amp, args.tta)
        ema_accuracy = None if ema is None else evaluate(ema, test_x, test_y, env, amp, args.tta)
        seconds = time.perf_counter() - start
        clock.resume()
        tracker.add_evaluation(accuracy, global_step, clock)
        ema_fields = {} if ema is None else {"test_acc_ema": ema_accuracy}  # cutrain's names
        metrics.write(kind="eval", epoch=epoch, global_step=global_step, epoch_end=epoch_end, test_acc=accuracy,
                      eval_time_s=seconds, training_time_s=clock.training_s(), **ema_fields)
        if not epoch_end:
            env.print(f"== eval: step {global_step} [{epoch}/{epochs}] | test acc: {100 * accuracy:.2f}%"
                      f"{ema_accuracy_text(ema_accuracy)} | {seconds:.1f} s")
        return accuracy, ema_accuracy

    for epoch in range(1, epochs + 1):
        sampler.set_epoch(epoch - 1)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)  # exact enough to difference per step
        correct = torch.zeros((), dtype=torch.int64, device=device)
        seen = step = 0
        logged_loss = logged_correct = 0  # the sums at the last log line: a step line is its interval's mean
        epoch_start = clock.training_s()
        clock.pause(EPOCH_START)  # until the epoch's first batch is in
        interval_start, interval_first_step = clock.step_s(), 0
        data_seconds, asked = 0.0, time.perf_counter()  # waiting for batches since the last line, as cutrain
        for x, y in batches():
            data_seconds += time.perf_counter() - asked
            clock.resume()
            x = x.contiguous(memory_format=memory_format)
            lr = lr_schedule.lr_at(args.lr_schedule, args.lr, schedule_steps, warmup_steps, global_step,
                                   args.lr_milestones, args.lr_gamma)
            for group in opt.param_groups:
                group["lr"] = lr
            with amp():
                logits = net(x)
                loss = criterion(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if args.clip_grad_norm > 0:  # the norm before clipping, what the step line reports
                clipped_norm = nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
            opt.step()
            # The reference script's update, with `step` its i, the batch's index in the epoch, and its restarts
            # while the warm-up lasts (Note [The EMA of the weights] in nn/model_ema.h).
            if ema is not None and step % args.model_ema_steps == 0:
                ema.update_parameters(model)
                if epoch - 1 < args.warmup_epochs:
                    ema.n_averaged.fill_(0)
            loss_sum += loss.detach()
            correct += (logits.argmax(1) == y).sum()
            seen += len(y)
            step += 1
            global_step += 1
            last = step == steps_per_epoch or global_step == total_steps
            if step % args.log_every == 0 or last:
                losses, hits = loss_sum.item(), correct.item()  # the read-back syncs
                sync()
                steps = step - interval_first_step
                mean_loss, acc = (losses - logged_loss) / steps, (hits - logged_correct) / (steps * len(y))
                logged_loss, logged_correct = losses, hits
                seconds = clock.step_s() - interval_start
                ms = seconds * 1000 / steps
                rate = images_per_step * 1000 / ms
                # the last step's gradient norm after DDP's average, clip_grad_norm_'s total norm (before it
                # scaled the gradient), as cutrain's
                if args.clip_grad_norm > 0:
                    grad_norm = clipped_norm.item()
                else:
                    grad_norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]).item()
                if warm:
                    warm_images += images_per_step * steps
                    warm_seconds += seconds
                    keep = math.exp(-seconds / 20)
                    pace_steps, pace_seconds = pace_steps * keep + steps, pace_seconds * keep + seconds
                warm = True
                # cutrain's elapsed time (since training began, evaluations included) and ETA (the remaining
                # steps at the recent pace after warm-up, or at this interval's before there is one)
                elapsed = time.perf_counter() - wall_start
                step_seconds = pace_seconds / pace_steps if pace_steps else seconds / steps
                eta = step_seconds * (total_steps - global_step)
                data_ms, peak = data_seconds * 1000 / steps, peak_memory(device)
                env.print(f"== step: [{step:>3}/{steps_per_epoch}] [{epoch}/{epochs}] | loss: {mean_loss:.3f} "
                          f"| grad norm: {grad_norm:.3f} | train acc: {100 * acc:.3f}% | {rate:.0f} img/s | {ms:.1f} ms/step "
                          f"| data: {data_ms:.1f} ms/step | max mem: {peak / 2**20:.0f} MiB | lr: {lr:.4g} "
                          f"| elapsed: {clock_text(elapsed)} | eta: {clock_text(eta)}")  # cutrain's shape
                metrics.write(kind="step", epoch=epoch, step=step, steps_per_epoch=steps_per_epoch,
                              global_step=global_step, loss=mean_loss, grad_norm=grad_norm, acc=acc, lr=lr,
                              images_per_s=rate, ms_per_step=ms, data_ms_per_step=data_ms, peak_memory_bytes=peak,
                              elapsed_s=elapsed, eta_s=eta)
                interval_start, interval_first_step, data_seconds = clock.step_s(), step, 0.0
            if last:
                break
            evaluate_if_due(epoch, False)
            asked = time.perf_counter()
            if tracker.reached:
                break
        if tracker.reached:
            break  # mid-epoch, at the target
        sync()
        epoch_time = clock.training_s() - epoch_start
        totals = env.sum(torch.stack([loss_sum.float(), correct.float(), torch.tensor(float(seen), device=device)]))
        record = dict(kind="epoch", epoch=epoch, global_step=global_step,
                      loss=totals[0].item() / (step * env.world), acc=totals[1].item() / totals[2].item(),
                      lr=opt.param_groups[0]["lr"], images_per_s=images_per_step * step / epoch_time,
                      epoch_time_s=epoch_time)
        evaluation = evaluate_if_due(epoch, True)
        test = ""
        if evaluation is not None:
            record["test_acc"], ema_accuracy = evaluation
            test = f" | test acc: {100 * record['test_acc']:.2f}%{ema_accuracy_text(ema_accuracy)}"
            if ema is not None:
                record["test_acc_ema"] = ema_accuracy
        record["peak_memory_bytes"] = peak_memory(device)
        env.print(f"== epoch {epoch}/{epochs} | loss: {record['loss']:.3f} | train acc: {100 * record['acc']:.3f}%{test} "
                  f"| {epoch_time:.1f} s | {record['images_per_s']:.0f} img/s")
        metrics.write(**record)
        if tracker.reached:
            break

    training_time = clock.training_s()
    wall = time.perf_counter() - wall_start
    eval_time = clock.paused_s(EVALUATION)
    mean_rate = warm_images / warm_seconds if warm_seconds > 0 else None
    metrics.write(kind="summary", wall_time_s=wall, training_time_s=training_time, eval_time_s=eval_time,
                  mean_images_per_s=mean_rate, tta=args.tta, **tracker.summary_fields(), best_test_acc=tracker.best,
                  final_test_acc=tracker.final, peak_memory_bytes=peak_memory(device), world_size=env.world,
                  precision=precision, stem=args.stem, batch_size=args.batch_size, program="pytorch",
                  channels_last=args.channels_last, compile=args.compile, data_on_gpu=args.data_on_gpu)
    accuracy = ""
    if tracker.final is not None:
        accuracy = f", final test accuracy {100 * tracker.final:.2f}% (best {100 * tracker.best:.2f}%)"
    env.print(f"done in {wall:.1f} s (training {training_time:.1f} s, evaluation {eval_time:.1f} s): "
              f"{mean_rate or 0:.0f} images/s after warm-up{accuracy}")  # cutrain's closing line
    if tracker.target is not None:
        env.print(tracker.summary_line(epoch))
    return ema


def ema_accuracy_text(accuracy):
    """" | test acc (EMA): 91.20%" where the average of the weights was evaluated (--model-ema), else "", as
    cutrain's lines say it."""
    return "" if accuracy is None else f" | test acc (EMA): {100 * accuracy:.2f}%"


def clock_text(seconds):
    """"0:04:07", "13:28:10": a duration in whole seconds as hours, minutes and seconds (cutrain's clock_text)."""
    s = round(max(0.0, seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def print_banner(env, args, model, sizes, steps_per_epoch, total_steps):
    """Rank 0's start-up lines: the configuration, the model and the data, as cutrain's banner gives them."""
    device = env.device
    setup = [f"world size {env.world}", f"device {device}"]
    if device.type == "cuda":
        setup[-1] += f" ({torch.cuda.get_device_name(device)})"
    setup.append("precision bf16 autocast" if args.amp == "bf16" else "precision fp32")
    if args.channels_last:
        setup.append("channels_last")
    if args.compile:
        setup.append(f"torch.compile {args.compile}")
    setup.append(f"data resident on {device}" if args.data_on_gpu else f"DataLoader ({args.workers} workers)")
    env.print("pytorch reference: " + ", ".join(setup))
    n_params = sum(p.numel() for p in model.parameters())
    env.print(f"resnet18 ({args.stem} stem), {n_params:,} parameters; train {sizes[0]} / test {sizes[1]} images; "
              f"{steps_per_epoch} steps per epoch, {total_steps} steps, batch {args.batch_size} per rank")


def peak_memory(device):
    """Bytes the caching allocator took from the GPU at most (what the process held, like cudaMalloc totals), or
    on the CPU the process's peak resident set, as cutrain reports."""
    if device.type == "cuda":
        return torch.cuda.max_memory_reserved(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
