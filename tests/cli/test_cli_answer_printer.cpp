// trimkv chat's answer printer: a thinking model's reasoning labelled and dimmed apart from the
// answer, whatever the pieces the stream arrives in.
#include <catch2/catch.hpp>

#include <sstream>

#include "answer_printer.h"

using trimkv::cli::AnswerPrinter;

namespace {
std::string print(const std::string& text, size_t piece, bool opens, bool dim) {
  std::ostringstream out;
  AnswerPrinter p(out, opens, dim);
  for (size_t at = 0; at < text.size(); at += piece) p.push(text.substr(at, piece));
  p.finish();
  return out.str();
}
}  // namespace

TEST_CASE("the chat prints a thinking block apart from the answer, in any pieces", "[cli][thinking]") {
  const std::string qwen3 = "I count the circles: two.\n</think>\n\nThere are two circles.";
  for (size_t piece : {1, 3, 7, 100}) {
    CAPTURE(piece);
    REQUIRE(print(qwen3, piece, true, false) == "(thinking) I count the circles: two.\n\nThere are two circles.");
    // On a terminal the reasoning is faint.
    const std::string shown = print(qwen3, piece, true, true);
    REQUIRE(shown.rfind("\x1b[2m(thinking) \x1b[0m\x1b[2m", 0) == 0);
    REQUIRE(shown.find("\x1b[0m\n\nThere are two circles.") != std::string::npos);
    // A model that writes the block itself; and a plain answer (a lone "<" waits, then shows).
    REQUIRE(print("<think>\nhmm\n</think>\n\n42", piece, false, false) == "(thinking) hmm\n\n42");
    REQUIRE(print("<3 is not a tag. é", piece, false, false) == "<3 is not a tag. é");
  }
  // Stopped while thinking: what was thought is printed.
  REQUIRE(print("still thinking about the", 2, true, false) == "(thinking) still thinking about the");
}
