// The Jinja interpreter on broken input: real chat templates cut, spliced and mutated at random
// (fixed seeds) must either render or fail with a trimkv::Error naming the template and a
// position; never crash, hang or throw anything else.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "trimkv/core/error.h"
#include "trimkv/core/jinja.h"

namespace {

using ojson = nlohmann::ordered_json;

std::vector<std::pair<std::string, ojson>> real_templates() {
  const std::string dir = trimkv::test::data_dir() + "/chat_templates";
  std::ifstream in(dir + "/cases.json", std::ios::binary);
  const ojson cases = ojson::parse(in);
  std::vector<std::pair<std::string, ojson>> out;
  std::vector<std::string> seen;
  for (const ojson& c : cases) {
    const std::string file = c["template"];
    if (std::find(seen.begin(), seen.end(), file) != seen.end()) continue;
    seen.push_back(file);
    out.emplace_back(trimkv::test::read_bytes(dir + "/" + file), c["context"]);
  }
  return out;
}

// Pieces that steer mutations into the grammar's corners.
const std::vector<std::string> kFragments = {
    "{%", "%}", "{{", "}}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", "(", ")", "[", "]", "{", "}", "'", "\"",
    "|", "|trim", "|tojson", ".", ",", ":", "::-1", " if ", " else ", " for ", " in ", " endfor ", " endif ",
    " set ", "=", "==", " not ", " and ", " or ", "~", "+", "-", "*", "/", "//", "%", "**", "\\", "\n",
    "loop.", "namespace(", "raise_exception(", "macro ", "call ", "endmacro", "recursive", "messages[0]",
    "1e309", "-0", "99999999999999999999", "\xff", "\xc3", "\xe2\x82", "\0"};

std::string mutate(const std::string& src, std::mt19937_64& rng) {
  std::string s = src;
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < n; ++k) {
    const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 5) {
      case 0:  // delete a run
        if (!s.empty()) s.erase(std::min(at, s.size() - 1), 1 + rng() % 16);
        break;
      case 1:  // insert a fragment
        s.insert(at, kFragments[rng() % kFragments.size()]);
        break;
      case 2:  // truncate
        s.resize(at);
        break;
      case 3:  // duplicate a run (nesting, repeated blocks)
        if (!s.empty()) {
          const size_t from = rng() % s.size();
          s.insert(at, s.substr(from, 1 + rng() % 200));
        }
        break;
      default:  // flip a byte
        if (!s.empty()) s[std::min(at, s.size() - 1)] = static_cast<char>(rng() % 256);
    }
  }
  return s;
}

}  // namespace

TEST_CASE("mutated real chat templates render or fail with a named error, never crash", "[jinja][fuzz]") {
  const auto templates = real_templates();
  REQUIRE(templates.size() >= 17);
  std::mt19937_64 rng(20261201);
  trimkv::jinja::Options options;
  options.limits.max_steps = 200'000;  // each try stays fast; the limit is itself under test
  size_t parsed = 0, rendered = 0, failed = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20000; ++i) {
    const auto& [source, context] = templates[rng() % templates.size()];
    const std::string name = "fuzz-" + std::to_string(i) + ".jinja";
    const std::string text = mutate(source, rng);
    CAPTURE(i);
    try {
      const trimkv::jinja::Template t = trimkv::jinja::Template::parse(text, name, options);
      ++parsed;
      t.render(context);
      ++rendered;
    } catch (const trimkv::Error& e) {
      ++failed;
      const std::string msg = e.what();
      // name:line:column: ... (a limit or a raise included)
      if (msg.rfind(name + ":", 0) != 0) FAIL("error without its template name: " << msg);
    } catch (const std::exception& e) {
      FAIL("not a trimkv::Error: " << e.what() << "\n--- template ---\n" << text);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(parsed << " parsed, " << rendered << " rendered, " << failed << " refused in " << seconds << " s");
  CHECK(rendered > 500);
  CHECK(failed > 500);
  CHECK(seconds < 120);
}
