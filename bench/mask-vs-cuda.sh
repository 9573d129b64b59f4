#!/usr/bin/env bash
# Checks `lanes doctor`'s reading of CUDA_VISIBLE_DEVICES against what CUDA itself makes
# visible (through PyTorch), for a set of masks. Run on a GPU host from a folder with `lanes`.
set -u
cd "${DEVRUN:-devrun}"
u0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | sed -n 1p)
u1=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | sed -n 2p)
for mask in "1" "1,0" "${u1:0:12}" "$u0,$u1" "0,7,1" "-1" "" "GPU-" "${u1:4:8}" "0,0" "1,${u0:0:12},7,0"; do
  cuda=$(CUDA_VISIBLE_DEVICES="$mask" python3 -c "
import torch
print(','.join(str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())))" 2>/dev/null)
  lanes=$(CUDA_VISIBLE_DEVICES="$mask" ./lanes doctor --json | python3 -c "
import json, sys
r = json.load(sys.stdin)
v = r['cuda_visible_devices']['visible']
print(','.join(r['gpus'][p]['uuid'][4:] for p in v))")
  verdict=$([ "$cuda" = "$lanes" ] && echo same || echo DIFFERENT)
  printf '%-28s cuda=[%s] lanes=[%s] %s\n' "\"$mask\"" "$cuda" "$lanes" "$verdict"
done
