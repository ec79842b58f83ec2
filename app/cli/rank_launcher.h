// Data-parallel ranks for `trimkv train-gates`: joining a group from the environment the usual
// launchers set (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and --nproc N, which starts N
// local ranks of this program itself and watches them.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "trimkv/core/train_gates.h"

namespace trimkv::cli {

// The group this process belongs to according to RANK, WORLD_SIZE, MASTER_ADDR (default
// 127.0.0.1) and MASTER_PORT (default 29500); world_size 1 when WORLD_SIZE is unset. A value
// that is not a number, or a RANK outside 0..WORLD_SIZE-1, is a UsageError naming the variable.
DataParallelOptions data_parallel_from_environment();

// Starts `n` copies of this executable with `args` (the command and its options, --nproc left
// out) as ranks 0..n-1 on 127.0.0.1 and a free port, prints their pids, forwards SIGINT and
// SIGTERM to them and waits. When a rank fails or is killed, the failure is named on `err` and
// the others are stopped: they fail on their own at their next collective, naming the lost peer;
// any still running after 10 s get SIGTERM, after 30 s SIGKILL. Returns the failed rank's status
// (128 + signal when killed), else 130 when the ranks were interrupted, else 0.
int launch_local_ranks(int n, const std::vector<std::string>& args, std::ostream& err);

}  // namespace trimkv::cli
