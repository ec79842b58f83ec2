// A Jinja interpreter for the subset of Jinja2 that the chat templates of real checkpoints use
// (transformers renders them with jinja2's ImmutableSandboxedEnvironment, trim_blocks and
// lstrip_blocks on, the loopcontrols extension and a `{% generation %}` tag; this renders the
// same strings). No Python, no LibTorch: plain C++ on top of nlohmann::ordered_json inputs.
//
// Supported: {{ }}, {% %}, {# #}, whitespace control ({%- -%} {{- -}} {#- -#} and the `+`
// forms), raw blocks; if/elif/else, for (tuple unpacking, `if` filter, else, loop.index/
// index0/revindex/revindex0/first/last/length/previtem/nextitem/cycle/changed/depth),
// break/continue, set (also of a namespace attribute, tuple unpacking, block set with filters),
// macro/call with defaults, keyword arguments, varargs/kwargs and caller(), filter blocks, with
// blocks, generation blocks (rendered as their body); expressions with Python semantics and
// jinja2's precedence: literals (strings with Python escapes, ints, floats, true/false/none in
// both cases), lists, tuples, dicts, attribute and item access (the sandbox's lookup order),
// slicing with steps, calls with keyword, *args and **kwargs arguments, `in`/`not in`,
// `is`/`is not` tests, `~`, + - * / // % ** (and printf-style %s %r %d on strings), chained
// comparisons, and/or/not, conditional expressions; the filters and tests chat templates call
// and the str/list/dict methods they use (listed in jinja_builtins.cpp and jinja_methods.cpp);
// globals raise_exception, strftime_now, range (at most 100000 items, as jinja2's sandbox),
// namespace, dict.
// Not supported, and refused with an error naming the construct: {% extends/include/import/
// from/block/autoescape/do %}, recursive for loops, str.format, \N{...} escapes and filters
// outside that list (batch, format, groupby, ...).
//
// Errors: Error{Format} for a syntax error, and for an unknown filter or test outside `if`
// statements and conditional expressions (where jinja2 too reports it only when it runs);
// Error{Input} for a failure while rendering (raise_exception, an undefined value used where one
// is required, an unknown method, a type error, a limit reached) and for a source over
// Limits::max_source_bytes. Every message starts with "<template name>:<line>:<column>: "
// (1-based, the column in characters; 1:1 for the template as a whole).
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
  int64_t max_steps = 50'000'000;        // evaluation steps: statements, loop iterations, calls, filters,
                                         // and one per 64 bytes of string built
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

  // Renders with `context` as the global variables (an object, or null for none; ordered keys,
  // so tojson keeps the caller's key order as Python's json.dumps does). Thread-safe: a Template
  // is immutable and each render has its own state.
  std::string render(const nlohmann::ordered_json& context) const;

  const std::string& name() const;

 private:
  struct Impl;
  explicit Template(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> m_impl;
};

}  // namespace trimkv::jinja
