// The decode-path logits check shared by the low-precision and GGUF tests: the oracle fixtures'
// logits at positions 11..17 of kOracleTokens (tests/oracle/quant_fixtures.py, gguf_fixtures.py).
#pragma once
#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "trimkv/core/generation.h"
#include "trimkv/core/kv_cache.h"
#include "trimkv/core/text_model.h"

namespace trimkv::test {

// 12 prompt tokens, then 6 decoded.
inline const std::vector<int32_t> kOracleTokens = {1, 17, 42, 99, 3, 250, 8, 64, 11, 5, 77, 200, 5, 9, 100, 31, 7, 64};

// max |logits - want[i]| over the 12-token prefill (chunks of 8: the GEMM path) and 6 decode
// steps (the GEMV); want: [7, vocab], on a float32 cache of blocks of 4.
inline double worst_logit_error(const TextModel& m, const at::Tensor& want) {
  const std::vector<int32_t>& t = kOracleTokens;
  KvCache cache(kv_geometry_of(m.config, 4));
  TextRunner runner(m, cache, 8);
  at::Tensor logits = runner.prefill(std::vector<int32_t>(t.begin(), t.begin() + 12));
  double worst = 0;
  for (int64_t i = 0; i < 7; ++i) {
    worst = std::max(worst, (logits - want[i]).abs().max().item<double>());
    if (i < 6) logits = runner.step(t[12 + i]);
  }
  return worst;
}

}  // namespace trimkv::test
