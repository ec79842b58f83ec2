// A Jinja interpreter for the subset of Jinja2 that the chat templates of real checkpoints use
// (transformers renders them with jinja2's ImmutableSandboxedEnvironment, trim_blocks and
// lstrip_blocks on, the loopcontrols extension and a `{% generation %}` tag; this renders the
// same strings). No Python, no LibTorch: plain C++ on top of nlohmann::ordered_json inputs.
//
// Supported: {{ }}, {% %}, {# #}, whitespace control ({%- -%} {{- -}}), raw blocks;
// if/elif/else, for (tuple unpacking, `if` filter, else, loop.index/index0/revindex/revindex0/
// first/last/length/previtem/nextitem/cycle), break/continue, set (also `set x = ...` of a
// namespace attribute and block set), macro/call with defaults and caller(), filter blocks,
// generation blocks (rendered as their body); expressions with Python semantics: literals
// (strings with escapes, ints, floats, true/false/none in both cases), lists, tuples, dicts,
// attribute and item access, slicing with steps, calls with keyword arguments, `in`/`not in`,
// `is`/`is not` tests, `~`, + - * / // % **, comparisons (chained), and/or/not, conditional
// expressions; the filters and tests real templates call and the str/list/dict methods they use
// (see jinja_builtins.cpp for the list); globals raise_exception, strftime_now, range, namespace,
// dict, cycler-free joiner.
//
// Errors: Error{Format} for a syntax error and Error{Input} for a failure while rendering
// (raise_exception, an undefined value used where one is required, an unknown filter/test/method,
// a type error, a limit reached); every message starts with "<template name>:<line>:<column>: ".
// An unsupported construct is always an error, never a silent wrong render.
//
// Limits bound time and memory on hostile templates: see Limits.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace trimkv::jinja {

struct Limits {
  size_t max_source_bytes = 16u << 20;   // templates larger than this are refused when parsed
  size_t max_output_bytes = 64u << 20;   // rendering stops with an error past this much output
  int64_t max_steps = 50'000'000;        // evaluation steps (loop iterations, calls, nodes)
  int max_call_depth = 256;              // nested macro calls (infinite recursion)
  int max_nesting = 512;                 // nested expressions / blocks while parsing
  int max_eval_depth = 3000;             // nested evaluation frames while rendering (statements,
                                         // expressions and macro calls together): bounds the C++ stack
};

// The Jinja environment settings transformers uses for chat templates.
struct Options {
  bool trim_blocks = true;    // the first newline after a block tag is removed
  bool lstrip_blocks = true;  // whitespace before a block tag at the start of a line is removed
  bool keep_trailing_newline = false;  // jinja2's default: one trailing newline is dropped
  Limits limits;
  int64_t now_unix = -1;  // strftime_now's time: -1 = the local clock (transformers' datetime.now());
                          // otherwise these Unix seconds, formatted in UTC (deterministic tests)
};

struct Node;  // the parsed template (jinja_ast.h, private)

class Template {
 public:
  // Parses `source`; `name` (a file path, or a description such as "tokenizer_config.json
  // chat_template") prefixes every error message. Error{Format} with line and column on a
  // syntax error, Error{Input} when the source exceeds the limits.
  static Template parse(const std::string& source, const std::string& name, const Options& options = {});

  // Renders with `context` as the global variables (an object; ordered keys, so tojson keeps
  // the caller's key order as Python's json.dumps does). Thread-safe: a Template is immutable.
  std::string render(const nlohmann::ordered_json& context) const;

  const std::string& name() const;

 private:
  struct Impl;
  explicit Template(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> m_impl;
};

}  // namespace trimkv::jinja
