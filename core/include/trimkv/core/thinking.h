// Answers of thinking models (Qwen3 / Qwen3-VL Thinking, DeepSeek-R1 distills): the reasoning
// inside <think>…</think> before the answer proper, shown apart from it (the CLI dims it, the
// Studio folds it). Plain C++.
#pragma once
#include <string>

namespace trimkv {

struct ThinkingSplit {
  bool has_thinking = false;  // the text holds (or, while streaming, is inside) a thinking block
  bool closed = false;        // its </think> has come
  std::string thinking;       // without the tags and the whitespace around them
  std::string answer;         // the rest: what the answer says
};

// Splits generated `text`. `opened_by_prompt`: the chat template's generation prompt already
// wrote "<think>" (Qwen3 Thinking), so the text starts inside the block; otherwise a block counts
// only when the text starts with "<think>" (after whitespace).
ThinkingSplit split_thinking(const std::string& text, bool opened_by_prompt);

}  // namespace trimkv
