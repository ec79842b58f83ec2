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

TEST_CASE("Temperature with top-k > 1 draws from softmax(logits / T) over the k largest; seeds reproduce",
          "[sampling]") {
  const std::vector<float> logits{0.3f, 2.0f, -1.0f, 1.2f, 1.9f, 0.0f};
  SamplingParams p;
  p.temperature = 0.5f;
  p.top_k = 3;  // tokens 1, 4, 3
  p.seed = 7;
  // The reference, computed here in double: softmax of logits / T over the top 3, 0 elsewhere.
  std::vector<double> want(logits.size(), 0.0);
  double z = 0;
  for (int i : {1, 4, 3}) z += want[i] = std::exp(logits[i] / 0.5);
  for (double& w : want) w /= z;
  Sampler s(p);
  const int n = 40000;
  std::vector<int> counts(logits.size(), 0);
  std::vector<int32_t> first;
  for (int i = 0; i < n; ++i) {
    const int32_t x = s.sample(logits.data(), static_cast<int64_t>(logits.size()), {});
    counts[static_cast<size_t>(x)]++;
    if (i < 200) first.push_back(x);
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    INFO("token " << i << ": " << counts[i] / double(n) << " vs " << want[i]);
    CHECK(std::abs(counts[i] / double(n) - want[i]) < 0.01);  // ~4 standard deviations
  }
  // The same seed draws the same sequence; another seed another one.
  auto draw = [&](uint64_t seed) {
    SamplingParams q = p;
    q.seed = seed;
    Sampler t(q);
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) out.push_back(t.sample(logits.data(), static_cast<int64_t>(logits.size()), {}));
    return out;
  };
  CHECK(draw(7) == first);
  CHECK(draw(8) != first);
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
