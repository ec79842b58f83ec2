// Sampler: greedy, temperature, top-k, top-p, repetition penalty, seeds.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "trimkv/core/error.h"
#include "trimkv/core/sampling.h"

using namespace trimkv;

TEST_CASE("Greedy sampling takes the argmax, lowest id on ties", "[sampling]") {
  Sampler s({});
  std::vector<float> logits{0.1f, 2.0f, -1.0f, 2.0f};
  REQUIRE(s.sample(logits.data(), 4, {}) == 1);
}

TEST_CASE("Repetition penalty divides positive and multiplies negative logits of seen tokens", "[sampling]") {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> logits{3.0f, 2.0f, -1.0f};
  REQUIRE(s.sample(logits.data(), 3, {0}) == 1);        // 3/2 = 1.5 < 2
  REQUIRE(s.sample(logits.data(), 3, {0, 0, 1}) == 0);  // counted once each: 1.5 > 1.0
}

TEST_CASE("Top-k 1 and a tiny top-p both reduce sampling to the argmax", "[sampling]") {
  std::vector<float> logits{0.0f, 1.0f, 0.5f, 0.9f};
  SamplingParams k;
  k.temperature = 1.0f;
  k.top_k = 1;
  SamplingParams pp;
  pp.temperature = 1.0f;
  pp.top_p = 0.01f;
  Sampler sk(k), sp(pp);
  for (int i = 0; i < 50; ++i) {
    REQUIRE(sk.sample(logits.data(), 4, {}) == 1);
    REQUIRE(sp.sample(logits.data(), 4, {}) == 1);
  }
}

TEST_CASE("Temperature sampling follows the softmax and is reproducible from its seed", "[sampling]") {
  std::vector<float> logits{0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  Sampler a(p), b(p);
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const int32_t x = a.sample(logits.data(), 2, {});
    REQUIRE(x == b.sample(logits.data(), 2, {}));
    ones += x;
  }
  REQUIRE(std::abs(ones / double(n) - 0.75) < 0.02);
}

TEST_CASE("Top-p keeps the smallest prefix reaching the mass", "[sampling]") {
  std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.7f;  // {0.5, 0.3} reaches 0.8 >= 0.7: token 2 is never drawn
  Sampler s(p);
  std::map<int, int> counts;
  for (int i = 0; i < 5000; ++i) counts[s.sample(logits.data(), 3, {})]++;
  REQUIRE(counts[2] == 0);
  REQUIRE(counts[0] > counts[1]);
}

TEST_CASE("Out-of-range sampling parameters are refused by name", "[sampling][bad-input]") {
  SamplingParams p;
  p.temperature = -1;
  REQUIRE_THROWS_WITH(validate(p), Catch::Contains("temperature"));
  p = {};
  p.top_p = 0;
  REQUIRE_THROWS_WITH(validate(p), Catch::Contains("top-p"));
  p = {};
  p.top_k = -2;
  REQUIRE_THROWS_WITH(validate(p), Catch::Contains("top-k"));
  p = {};
  p.repetition_penalty = 0;
  REQUIRE_THROWS_WITH(validate(p), Catch::Contains("repetition penalty"));
}
