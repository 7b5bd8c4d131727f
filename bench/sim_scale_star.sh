#!/usr/bin/env bash
# The star plan of DeepSeek-V3 at 256 ranks (128 trainer ranks: ep=16, pp=4, dp=2; 16 replicas
# of rollout tp=8) on GB200 NVL72 racks: about 99 million pieces. refit plan counts them as it
# makes them (seconds, tens of MB); refit simulate must hold them all for the schedule (56
# bytes a piece), so it needs about 6 GB. Prints what bench/sim_scale.sh prints.
#
#   bench/sim_scale_star.sh [refit simulate options...]
# Environment: as bench/sim_scale.sh; this sets MODEL, PLAN, CLUSTER, TRAINER and ROLLOUT
# unless given.
set -euo pipefail
cd "$(dirname "$0")"
MODEL=${MODEL:-deepseek-v3} PLAN=${PLAN:-star} CLUSTER=${CLUSTER:-gb200-nvl72} \
  TRAINER=${TRAINER:-fsdp=1,tp=1,ep=16,pp=4,dp=2} ROLLOUT=${ROLLOUT:-tp=8,dp=16} \
  exec ./sim_scale.sh "$@"
