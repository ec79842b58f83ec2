// The byte-level BPE trainer: the merges of the Hugging Face `tokenizers` library's own trainer
// on the same corpus, reproducible files (a byte snapshot of our own output: a regression test),
// parity with the library encoding with a file we trained (tests/oracle/bpe_trainer_fixtures.py),
// tie-breaking, bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <random>

#include "test_util.h"
#include "trimkv/core/bpe_trainer.h"
#include "trimkv/core/error.h"
#include "trimkv/core/tokenizer.h"

using trimkv::BpeTrainer;
using trimkv::BpeTrainerOptions;
using trimkv::BpeTrainResult;
using trimkv::Tokenizer;
using trimkv::test::ScratchDir;

namespace {

std::string fixture(const std::string& name) { return trimkv::test::data_dir() + "/bpe_trainer/" + name; }

std::vector<std::string> corpus_texts() {
  std::ifstream in(fixture("corpus.jsonl"));
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(in, line)) texts.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
  return texts;
}

BpeTrainResult train(const std::vector<std::string>& texts, BpeTrainerOptions options) {
  BpeTrainer trainer(std::move(options));
  for (const auto& t : texts) trainer.add_text(t);
  return trainer.train();
}

BpeTrainerOptions fixture_options() {
  const auto expected = trimkv::test::read_json(fixture("expected.json"));
  BpeTrainerOptions options;
  options.vocab_size = expected.at("vocab_size").get<int32_t>();
  options.min_frequency = expected.at("min_frequency").get<int64_t>();
  return options;
}

using Merges = std::vector<std::pair<std::string, std::string>>;

Merges merges_of(const nlohmann::json& run) {
  Merges merges;
  for (const auto& m : run.at("merges")) merges.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::string>());
  return merges;
}

// How many merges two lists share before they part (the shorter list's length if one is a prefix).
size_t n_common_merges(const Merges& a, const Merges& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

std::string merge_at(const Merges& merges, size_t i) {
  return i < merges.size() ? "'" + merges[i].first + "' + '" + merges[i].second + "'" : "(none)";
}

BpeTrainerOptions no_specials(int32_t vocab_size, int64_t min_frequency = 1) {
  BpeTrainerOptions options;
  options.special_tokens.clear();
  options.vocab_size = vocab_size;
  options.min_frequency = min_frequency;
  return options;
}

}  // namespace

TEST_CASE("BpeTrainer learns every merge of Hugging Face's BpeTrainer when it breaks ties as HF does",
          "[tokenizer][bpe_trainer]") {
  // hf_merges.json: tokenizers.trainers.BpeTrainer on corpus.jsonl with our settings (same
  // pre-tokenizer and specials, no normalizer, the 256 byte characters as initial alphabet; the
  // texts cut at special tokens, as we do): with the fixture's options, and with a vocab size the
  // corpus cannot fill, so training stops on min_frequency instead (144 merges, 443 tokens).
  // Only the order of pairs of equal count is HF's here; counting words and pairs, merging within
  // words and both stopping rules are the trainer's own, so the lists must agree exactly.
  const auto hf = trimkv::test::read_json(fixture("hf_merges.json"));
  const auto texts = corpus_texts();
  REQUIRE(hf.at("runs").size() == 2);
  for (const auto& run : hf.at("runs")) {
    BpeTrainerOptions options;
    options.vocab_size = run.at("vocab_size").get<int32_t>();
    options.min_frequency = run.at("min_frequency").get<int64_t>();
    options.tie_break = trimkv::BpeTieBreak::hf_token_ids;
    const BpeTrainResult ours = train(texts, options);
    const Merges theirs = merges_of(run);
    const size_t n_common = n_common_merges(ours.merges, theirs);
    INFO("vocab size " << options.vocab_size << ", tokenizers " << hf.at("tokenizers_version").get<std::string>()
                       << ": " << n_common << " merges agree; then ours " << merge_at(ours.merges, n_common)
                       << ", HF's " << merge_at(theirs, n_common));
    CHECK(theirs.size() >= 121);  // not a truncated fixture
    CHECK(n_common == theirs.size());
    CHECK(ours.merges.size() == theirs.size());
    CHECK(static_cast<int64_t>(ours.vocab.size()) == run.at("n_vocab").get<int64_t>());
  }
  CHECK(hf.at("runs")[1].at("n_vocab").get<int32_t>() < hf.at("runs")[1].at("vocab_size").get<int32_t>());
}

TEST_CASE("BpeTrainer's own tie-break parts from HF's at the first tie the two order differently",
          "[tokenizer][bpe_trainer]") {
  // With our default tie-break (by bytes) the first 7 merges are HF's; the 8th is a tie of 7
  // pairs of count 652 (every turn has one "User" and one "Assistant", and each pair inside them
  // occurs in those words only): we merge "As" + "s" ("As" < "U" byte-wise), HF "U" + "s" (a byte
  // token has a smaller id than any merge). From there the orders part and so do some tokens
  // (86 of the 121 merged strings are common), which is why the test above sets HF's tie-break
  // to compare every merge.
  const auto hf = trimkv::test::read_json(fixture("hf_merges.json"));
  const Merges theirs = merges_of(hf.at("runs")[0]);
  const BpeTrainResult ours = train(corpus_texts(), fixture_options());
  REQUIRE(n_common_merges(ours.merges, theirs) == 7);
  CHECK(ours.merges[7] == std::make_pair(std::string("As"), std::string("s")));
  CHECK(theirs[7] == std::make_pair(std::string("U"), std::string("s")));
}

TEST_CASE("BpeTrainer re-trains the committed tokenizer.json byte for byte", "[tokenizer][bpe_trainer]") {
  const auto texts = corpus_texts();
  REQUIRE(texts.size() > 100);
  const BpeTrainResult result = train(texts, fixture_options());
  CHECK(result.tokenizer_json == trimkv::test::read_bytes(fixture("tokenizer.json")));
  CHECK(static_cast<int32_t>(result.vocab.size()) == fixture_options().vocab_size);
  CHECK(result.n_special == 43);

  // The file depends on the multiset of texts only, not on their order.
  auto shuffled = texts;
  std::mt19937 rng(5);
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  CHECK(train(shuffled, fixture_options()).tokenizer_json == result.tokenizer_json);
}

TEST_CASE("Tokenizer encodes with a trained tokenizer.json exactly as Hugging Face tokenizers",
          "[tokenizer][bpe_trainer]") {
  const auto expected = trimkv::test::read_json(fixture("expected.json"));
  ScratchDir dir("bpe-trainer");
  const BpeTrainResult result = train(corpus_texts(), fixture_options());
  trimkv::save_tokenizer_json(result, dir.file("tokenizer.json"));
  for (const std::string& path : {fixture("tokenizer.json"), dir.file("tokenizer.json")}) {
    const Tokenizer tok = Tokenizer::from_file(path);
    CHECK(tok.vocab_size() == expected.at("hf_vocab_size").get<int32_t>());
    for (const auto& c : expected.at("cases")) {
      const std::string text = c.at("text");
      INFO(path << ": '" << text << "'");
      const auto ids = tok.encode(text);
      CHECK(ids == c.at("ids").get<std::vector<int32_t>>());
      CHECK(tok.decode(ids) == c.at("decoded").get<std::string>());
      CHECK(tok.decode(ids) == text);  // byte-level BPE without normalizer is lossless
    }
  }
}

TEST_CASE("BpeTrainer lays out specials, bytes, then merges", "[tokenizer][bpe_trainer]") {
  const BpeTrainResult result = train(corpus_texts(), fixture_options());
  const auto specials = trimkv::default_special_tokens();
  REQUIRE(specials.size() == 43);
  CHECK(specials[0] == "<|endoftext|>");
  CHECK(std::count(specials.begin(), specials.end(), "<row_6_col_6>") == 1);
  for (size_t i = 0; i < specials.size(); ++i) CHECK(result.vocab[i] == specials[i]);
  CHECK(result.vocab[43 + ' '] == "\xC4\xA0");  // "Ġ", the stand-in of the space byte
  CHECK(result.vocab[43 + 'a'] == "a");
  const Tokenizer tok = Tokenizer::from_file(fixture("tokenizer.json"));
  for (const char* s : {"<image>", "<end_of_utterance>", "<fake_token_around_image>", "<global-img>", "<|im_start|>"}) {
    INFO(s);
    const auto ids = tok.encode(s);
    REQUIRE(ids.size() == 1);
    CHECK(tok.is_special(ids[0]));
  }
  // Frequent world words became single tokens.
  CHECK(tok.encode(" triangles").size() == 1);
  CHECK(tok.encode("Assistant").size() == 1);
}

TEST_CASE("BpeTrainer merges the most frequent pair first and breaks ties by bytes", "[tokenizer][bpe_trainer]") {
  // (c, d) occurs twice, (a, b) once.
  auto r = train({"cd cd ab"}, no_specials(257));
  REQUIRE(r.merges.size() == 1);
  CHECK(r.merges[0] == std::make_pair(std::string("c"), std::string("d")));
  // A tie: the pair with the smaller bytes, whatever the text order.
  r = train({"zy", "ab"}, no_specials(257));
  REQUIRE(r.merges.size() == 1);
  CHECK(r.merges[0] == std::make_pair(std::string("a"), std::string("b")));
  r = train({"ab", "zy"}, no_specials(257));
  CHECK(r.merges[0] == std::make_pair(std::string("a"), std::string("b")));
  // Ties on the left token go to the smaller right token.
  r = train({"ac", "ab"}, no_specials(257));
  CHECK(r.merges[0] == std::make_pair(std::string("a"), std::string("b")));
  // Merges build on merges. Words "abc", "Ġabc", "Ġabc": (a,b) and (b,c) x3 tie -> (a,b);
  // then (ab,c) x3; then (Ġ,abc) x2.
  r = train({"abc abc abc"}, no_specials(259));
  using P = std::pair<std::string, std::string>;
  CHECK(r.merges == std::vector<P>{{"a", "b"}, {"ab", "c"}, {"\xC4\xA0", "abc"}});
  CHECK(r.vocab.back() == "\xC4\xA0" "abc");
  // HF's order puts the space's stand-in "Ġ" after every printable byte: words "Ġa", "Ġbc".
  CHECK(train({" a bc"}, no_specials(257)).merges[0] == P{"\xC4\xA0", "a"});
  BpeTrainerOptions hf_ties = no_specials(257);
  hf_ties.tie_break = trimkv::BpeTieBreak::hf_token_ids;
  CHECK(train({" a bc"}, hf_ties).merges[0] == P{"b", "c"});
}

TEST_CASE("BpeTrainer stops when no pair reaches min_frequency", "[tokenizer][bpe_trainer]") {
  const auto r = train({"ab cd ef"}, no_specials(1000, 2));
  CHECK(r.merges.empty());
  CHECK(r.vocab.size() == 256);
  const auto r1 = train({"aaaa"}, no_specials(1000, 1));
  // "aaaa": (a,a) x3 -> "aa aa"; then (aa, aa) x1 -> "aaaa".
  REQUIRE(r1.merges.size() == 2);
  CHECK(r1.vocab.back() == "aaaa");
}

TEST_CASE("BpeTrainer never merges across special tokens", "[tokenizer][bpe_trainer]") {
  BpeTrainerOptions options = no_specials(300);
  options.special_tokens = {"<image>"};
  const auto r = train({"<image><image>x<image>y"}, options);
  for (const auto& [a, b] : r.merges) {
    CHECK(a.find('<') == std::string::npos);
    CHECK(b.find('>') == std::string::npos);
  }
}

TEST_CASE("BpeTrainer rejects bad options and input with clear errors", "[tokenizer][bpe_trainer]") {
  auto message_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const trimkv::Error& e) {
      CHECK(e.kind() == trimkv::ErrorKind::Input);
      return e.what();
    }
    return "(no error)";
  };
  BpeTrainerOptions small;
  small.vocab_size = 200;
  const std::string msg = message_of([&] { BpeTrainer t(small); });
  CHECK_THAT(msg, Catch::Contains("vocab size 200"));
  CHECK_THAT(msg, Catch::Contains("299"));  // 43 specials + 256
  BpeTrainerOptions twice;
  twice.special_tokens.push_back("<image>");
  CHECK_THAT(message_of([&] { BpeTrainer t(twice); }), Catch::Contains("twice"));
  CHECK_THAT(message_of([&] { BpeTrainer t(BpeTrainerOptions{}); t.train(); }), Catch::Contains("no training text"));
  CHECK_THAT(message_of([&] { BpeTrainer t(BpeTrainerOptions{}); t.add_text("<image>"); t.train(); }),
             Catch::Contains("no training text"));
  CHECK_THAT(message_of([&] { BpeTrainer t(BpeTrainerOptions{}); t.add_text("bad \xFF utf8"); }),
             Catch::Contains("UTF-8"));
  ScratchDir dir("bpe-bad");
  trimkv::test::write_text(dir.file("a-file"), "x");
  BpeTrainer t(BpeTrainerOptions{});
  t.add_text("hello");
  CHECK_THROWS_AS(trimkv::save_tokenizer_json(t.train(), dir.file("a-file") + "/tokenizer.json"), trimkv::Error);
}
