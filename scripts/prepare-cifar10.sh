#!/usr/bin/env bash
# Checks the CIFAR-10 binary archive against its published MD5 and unpacks it.
#
#   scripts/prepare-cifar10.sh cifar-10-binary.tar.gz datasets/
#   # -> datasets/cifar-10-batches-bin/{data_batch_1..5.bin, test_batch.bin, batches.meta.txt}
#
# The archive is https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz (162 MiB); this script
# downloads nothing, so it works on machines without a network once the file is there.
set -euo pipefail
source "$(dirname "$0")/cli.sh"

published_md5=c32a1d4ab5d03f1284b67883e8d87530
if [ $# -ne 2 ]; then
  echo "usage: $0 cifar-10-binary.tar.gz OUT_DIR" >&2
  exit 2
fi
archive=$1 out=$2
[ -f "$archive" ] || die "$archive: no such file"
actual=$(md5sum "$archive" | cut -d' ' -f1)
[ "$actual" = "$published_md5" ] ||
  die "$archive: MD5 $actual, expected $published_md5 (incomplete or not the binary version)"
mkdir -p "$out"
tar -xzf "$archive" -C "$out"
echo "$prog: CIFAR-10 is in $out/cifar-10-batches-bin"
