// Next-token selection from one row of logits (plain C++, no tensors). Order as in transformers'
// logits processors: repetition penalty -> temperature -> top-k -> top-p -> sample.
// temperature == 0 means greedy (argmax after the repetition penalty; ties go to the lowest id).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace trimkv {

struct SamplingParams {
  float temperature = 0.0f;         // 0 = greedy
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float repetition_penalty = 1.0f;  // 1 = off; >1 discourages tokens already in the history
  uint64_t seed = 0;
};

// Throws Error{Input} naming the parameter when a value is out of range.
void validate(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // logits: [vocab]; history: every token of the sequence so far (prompt + generated).
  int32_t sample(const float* logits, int64_t vocab, const std::vector<int32_t>& history);

 private:
  SamplingParams m_params;
  std::mt19937_64 m_rng;
  std::vector<float> m_work;            // [vocab] scratch, reused across calls
  std::vector<int32_t> m_order;         // [vocab] scratch
};

}  // namespace trimkv
