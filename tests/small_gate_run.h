#pragma once
// The gate-training settings the tests share: a tiny gate network, a small budget and a few steps
// at a high rate, so that a run on a tiny model takes a second and its loss visibly moves.
#include <cstdint>
#include <string>

#include "trimkv/core/train_gates.h"

namespace trimkv::test {

inline TrainOptions small_gate_run(const std::string& out_path, int64_t max_len) {
  TrainOptions o;
  o.out_path = out_path;
  o.gate_hidden = 16;
  o.budget = 4;
  o.steps = 6;
  o.lr = 0.05;
  o.min_lr = 0.005;
  o.warmup = 1;
  o.checkpoint_every = 0;
  o.max_len = max_len;
  o.seed = 3;
  return o;
}

}  // namespace trimkv::test
