// The Jinja interpreter (trimkv/core/jinja.h) against Python jinja2 as transformers configures
// it for chat templates (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols, {% generation %}, transformers' tojson). Every expected string below was
// produced by jinja2 3.1.6 through transformers' own _compile_jinja_template; the checks named
// check_unsupported are the constructs this interpreter refuses on purpose.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "trimkv/core/error.h"
#include "trimkv/core/jinja.h"

using trimkv::Error;
using trimkv::ErrorKind;
using trimkv::jinja::Options;
using trimkv::jinja::Template;
using json = nlohmann::ordered_json;

namespace {

std::string render(const std::string& source, const std::string& context = "{}") {
  return Template::parse(source, "t.jinja", Options{}).render(json::parse(context));
}

std::string render_with(const std::string& source, const std::string& context, const Options& options) {
  return Template::parse(source, "t.jinja", options).render(json::parse(context));
}

// Renders and returns the Error that must come out of parsing or rendering.
Error failure_with(const std::string& source, const std::string& context, const Options& options) {
  try {
    render_with(source, context, options);
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected an error from: " << source);
  return Error(ErrorKind::Internal, "unreachable");
}

// jinja2 raises as well for these; the kind and the "t.jinja:<line>:<column>: ..." prefix are ours.
void check_error(const std::string& source, const std::string& context, ErrorKind kind, const std::string& prefix) {
  const Error e = failure_with(source, context, Options{});
  INFO("source: " << source << "\nmessage: " << e.what());
  CHECK(e.kind() == kind);
  CHECK(std::string(e.what()).rfind(prefix, 0) == 0);
}

// jinja2 renders these; this interpreter refuses them clearly instead of rendering differently.
void check_unsupported(const std::string& source, ErrorKind kind, const std::string& prefix) {
  const Error e = failure_with(source, "{}", Options{});
  INFO("source: " << source << "\nmessage: " << e.what());
  CHECK(e.kind() == kind);
  CHECK(std::string(e.what()).rfind(prefix, 0) == 0);
}

}  // namespace

// ---- lexer: whitespace ------------------------------------------------------------------------

TEST_CASE("Jinja trim_blocks removes the newline after a block tag but not after }}", "[jinja]") {
  CHECK(render("{% if true %}\n  yes\n{% endif %}\ndone") == "  yes\ndone");
  CHECK(render("{{ 'a' }}\n{{ 'b' }}") == "a\nb");
  CHECK(render("{% set x = 1 %}\n{{ x }}") == "1");
  CHECK(render("text{% if true %}\n{% endif %}\nmore") == "textmore");
  CHECK(render("{# comment #}\ntext") == "text");
}

TEST_CASE("Jinja lstrip_blocks strips indentation before block tags and comments, never before {{", "[jinja]") {
  CHECK(render("  {% if true %}\n  yes\n  {% endif %}") == "  yes\n");
  CHECK(render("a\n    {% for i in [1,2] %}\n    {{ i }}\n    {% endfor %}\nb") == "a\n    1\n    2\nb");
  CHECK(render("  {{ 'x' }}") == "  x");
  CHECK(render("  {# comment #}\ntext") == "text");
  CHECK(render("\t{% if true %}tab{% endif %}") == "tab");
  CHECK(render("x {% if true %} y {% endif %} z") == "x  y  z");  // not at a line start
}

TEST_CASE("Jinja whitespace control with - and + on every kind of tag", "[jinja]") {
  CHECK(render("{%- if true -%}   x   {%- endif -%}   y") == "xy");
  CHECK(render("a   {{- 'b' -}}   c") == "abc");
  CHECK(render("a  {{ 'b' }}  c") == "a  b  c");
  CHECK(render("a {#- c -#} b") == "ab");
  CHECK(render("a {#+ c +#}\nb") == "a \nb");
  CHECK(render("{% if true +%}\nx{%+ endif %}") == "\nx");
  CHECK(render("  {%+ if true %}x{% endif %}") == "  x");
  CHECK(render("{% for i in range(3) -%}\n{{ i }}\n{%- endfor %}") == "012");
  CHECK(render("{% if x %}{% endif %}{{ 1 }}{{- 2 -}}\n  {{ 3 }}", R"J({"x": 1})J") == "123");
}

TEST_CASE("Jinja raw blocks are not parsed and keep the newline after {% raw %}", "[jinja]") {
  CHECK(render("line1\n{% raw %}{{ not parsed }}{% endraw %}\nline2") == "line1\n{{ not parsed }}line2");
  CHECK(render("{%- raw -%}   x   {%- endraw -%}   y") == "xy");
  CHECK(render("{% raw %}  {% if %}  {% endraw %}") == "  {% if %}  ");
  CHECK(render("{% raw %}\n  a{% endraw %}\nb") == "\n  ab");
  CHECK(render("  {% raw %}x{% endraw %}") == "x");
}

TEST_CASE("Jinja drops one trailing newline of the source and normalises \\r\\n", "[jinja]") {
  CHECK(render("a\nb\n") == "a\nb");
  CHECK(render("a\n\n") == "a\n");
  CHECK(render("a\r\nb\rc\r\n") == "a\nb\nc");
  CHECK(render("{% if true %}\r\nx\r\n{% endif %}\r\n") == "x\n");
  CHECK(render("{{ \"a\r\nb\" }}") == "a\nb");
  Options keep;
  keep.keep_trailing_newline = true;
  CHECK(render_with("a\n", "{}", keep) == "a\n");
}

// ---- literals and expressions -----------------------------------------------------------------

TEST_CASE("Jinja literals: strings with Python escapes, numbers, constants, containers", "[jinja]") {
  CHECK(render(R"J({{ "a" "b" 'c' }} {{ '\x41\u0042\U00000043\101' }} {{ 'tab\there' }} {{ "q\"q" }} {{ 'q\'q' }})J") ==
        "abc ABCA tab\there q\"q q'q");
  CHECK(render(R"J({{ "\u00e9\n\t\\\x41\101" }}|{{ 'a\qb' }})J") == "\xc3\xa9\n\t\\AA|a\\qb");
  CHECK(render("{{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_0.5 }} {{ 1E3 }}") == "1000 31 15 5 10.5 1000.0");
  CHECK(render("{{ none }} {{ true }} {{ false }} {{ True }} {{ None }} {{ [none, true] }}") ==
        "None True False True None [None, True]");
  CHECK(render("{{ (1, 2) }} {{ 1, 2 }} {{ ('a',) }} {{ [] }} {{ {} }} {{ ((1,2),) }}") ==
        "(1, 2) (1, 2) ('a',) [] {} ((1, 2),)");
  CHECK(render("{{ {'a': {'b': 1}} }}") == "{'a': {'b': 1}}");
  CHECK(render("{{ {'a': 1}}}") == "{'a': 1}");
}

TEST_CASE("Jinja operator precedence is jinja2's, not Python's", "[jinja]") {
  // `**` is left-associative and binds looser than unary minus; `~` binds tighter than `+`.
  CHECK(render("{{ 2**3**2 }} {{ -2**2 }} {{ 'a' ~ 1 * 2 }}") == "64 4 a2");
  CHECK(render("{{ 10 - 2 - 3 }} {{ 2 * 3 + 4 }} {{ 2 + 3 * 4 }} {{ 'a' ~ 'b' == 'ab' }}") == "5 10 14 True");
  CHECK(render("{{ [1,2]|length - 1 }} {{ -3|abs }} {{ not 1 == 2 }}") == "1 3 True");  // (-3)|abs
  check_error("{{ 1 + 2 ~ 3 }}", "{}", ErrorKind::Input, "t.jinja:1:6: unsupported operand type(s) for +: 'int' and 'str'");
}

TEST_CASE("Jinja comparisons chain like Python's and compare across int and float", "[jinja]") {
  CHECK(render("{{ 0 and 1 }} {{ none or 'x' }} {{ '' or [] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 in [1] in [[1]] }}") ==
        "0 x [] True False True");
  CHECK(render("{{ 1 < 2 > 1 }} {{ 1 == 1 == 1 }} {{ 1 != 2 != 1 }} {{ 'a' in 'abc' }} {{ 'd' not in 'abc' }} "
               "{{ 2 in [1,2] }} {{ 'k' in {'k': 1} }}") == "True True True True True True True");
  CHECK(render("{{ 1 == 1.0 }} {{ [1] == (1,) }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }}") ==
        "True False True True True");
  check_error("{{ 1 < 'a' }}", "{}", ErrorKind::Input, "t.jinja:1:6: '<' not supported between instances of 'int' and 'str'");
}

TEST_CASE("Jinja arithmetic: true division, Python floor division and modulo, repetition", "[jinja]") {
  CHECK(render("{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.0 // 2 }} {{ 2 ** 10 }} "
               "{{ 2 ** -1 }} {{ 2.0 ** 3 }} {{ 10 / 4 }} {{ 10 / 2 }} {{ 7.5 % -2 }}") ==
        "3.5 3 -4 1 2 3.0 1024 0.5 8.0 2.5 5.0 -0.5");
  CHECK(render("{{ 'ab' * 3 }} {{ [1] * 3 }} {{ 3 * 'x' }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ 'x' ~ 1 ~ none ~ true }}") ==
        "ababab [1, 1, 1] xxx ab [1, 2] x1NoneTrue");
  CHECK(render("{{ true + 1 }} {{ true * 3 }} {{ -true }} {{ true / 2 }}") == "2 3 -1 0.5");
  CHECK(render("{{ '%s and %r' % ('a', 'b') }} {{ '%d%%' % 5 }}") == "a and 'b' 5%");
  check_error("{{ 1 / 0 }}", "{}", ErrorKind::Input, "t.jinja:1:6: division by zero");
  check_error("{{ 7 // 0 }}", "{}", ErrorKind::Input, "t.jinja:1:6: integer division or modulo by zero");
}

TEST_CASE("Jinja str() of values is Python's: float repr, list and dict repr, quoting", "[jinja]") {
  CHECK(render("{{ 1e16 }} {{ 1e-5 }} {{ 0.0001 }} {{ 1.0 }} {{ 123456789012345678.0 }} {{ 1/3 }} {{ 0.1 + 0.2 }}") ==
        "1e+16 1e-05 0.0001 1.0 1.2345678901234568e+17 0.3333333333333333 0.30000000000000004");
  CHECK(render("{{ 1e22 }} {{ 1e21 }} {{ 12345678901234567.0 }} {{ 0.000123 }} {{ -0.0 }} {{ 2.5e-5 }} {{ 100.0 }}") ==
        "1e+22 1e+21 1.2345678901234568e+16 0.000123 -0.0 2.5e-05 100.0");
  CHECK(render(R"J({{ [1, 'a', "it's", 'say "x"', {'k': [1.0, none]}] }})J") ==
        R"J([1, 'a', "it's", 'say "x"', {'k': [1.0, None]}])J");
  CHECK(render(R"J({{ ["It's", 'both \' "', 'a\nb', '\x01', '\u200b', '\xa0', 'é', '\\'] }})J") ==
        R"J(["It's", 'both \' "', 'a\nb', '\x01', '\u200b', '\xa0', 'é', '\\'])J");
  CHECK(render("{{ {'a': 1, 'b': 'two', 3: 4.5, none: true} }}") == "{'a': 1, 'b': 'two', 3: 4.5, None: True}");
  CHECK(render("{{ m }}", R"J({"m": {"role": "user", "content": [{"type": "text", "text": "hi"}]}})J") ==
        "{'role': 'user', 'content': [{'type': 'text', 'text': 'hi'}]}");
  CHECK(render("{{ d.items() }}|{{ d.keys() }}|{{ d.values() }}", R"J({"d": {"a": 1}})J") ==
        "dict_items([('a', 1)])|dict_keys(['a'])|dict_values([1])");
  CHECK(render("{% set ns = namespace(a=1) %}{{ ns }}") == "<Namespace {'a': 1}>");
  CHECK(render("{% macro m() %}{% endmacro %}{{ m }}") == "<Macro 'm'>");
}

TEST_CASE("Jinja slicing and indexing work by code point with Python's negative indices", "[jinja]") {
  CHECK(render("{{ [1,2,3,4,5][::-1] }} {{ [1,2,3,4,5][1:3] }} {{ [1,2,3,4,5][-2:] }} {{ [1,2,3,4,5][::2] }} "
               "{{ [1,2,3,4,5][:-1] }} {{ [1,2,3][5:] }} {{ [1,2,3,4,5][4:1:-2] }}") ==
        "[5, 4, 3, 2, 1] [2, 3] [4, 5] [1, 3, 5] [1, 2, 3, 4] [] [5, 3]");
  CHECK(render("{{ 'héllo'[::-1] }} {{ 'héllo'[1] }} {{ 'héllo'[-1] }} {{ 'héllo'|length }} {{ 'héllo'[1:3] }}") ==
        "olléh é o 5 él");
  CHECK(render("{{ (1,2,3)[1:] }} {{ (1,)[0] }}") == "(2, 3) 1");
  CHECK(render("{{ messages[0]['role'] }} {{ messages[1:]|length }} {{ messages[-1].content }}",
               R"J({"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "u"}]})J") ==
        "system 1 u");
  CHECK(render("{{ x['y']['z'] }} {{ x.y['z'] }} {{ x['y'].z }} {{ x.list.0 }} {{ x.list[1] }} {{ x.list[-1] }}",
               R"J({"x": {"y": {"z": "deep"}, "list": [10, 20, 30]}})J") == "deep deep deep 10 20 30");
}

TEST_CASE("Jinja undefined values render empty, are falsy and iterate as empty, and fail when used", "[jinja]") {
  CHECK(render("{{ u }}|{{ u is defined }}|{{ not u }}|{{ u == u }}|{{ u == none }}|{{ u ~ 'a' }}|{{ u|length }}") ==
        "|False|True|True|False|a|0");
  CHECK(render("{% for x in u %}a{% else %}b{% endfor %}|{{ 'a' in u }}|{{ u in [1] }}|{{ u|items|list }}") ==
        "b|False|False|[]");
  CHECK(render("{{ u|default('d') }}|{{ u|trim }}|{{ u|list }}|{{ u|join }}|{{ u|string }}|{{ u|upper }}|{{ u|first }}") ==
        "d||[]||||");
  CHECK(render("{{ none.foo }}|{{ x[5] }}|{{ 'abc'[10] }}|{{ 'abc'.foo }}|{{ x.foo is defined }}", R"J({"x": [1]})J") ==
        "||||False");
  CHECK(render("{{ 'x' if false }}|{{ (1 if false) is defined }}") == "|False");
  check_error("{{ y.foo }}", "{}", ErrorKind::Input, "t.jinja:1:5: 'y' is undefined");
  check_error("{{ x.foo.bar }}", R"J({"x": {}})J", ErrorKind::Input, "t.jinja:1:9: 'dict object' has no attribute 'foo'");
  check_error("{{ x[5].a }}", R"J({"x": [1]})J", ErrorKind::Input, "t.jinja:1:8: list object has no element 5");
  check_error("{{ u + 1 }}", "{}", ErrorKind::Input, "t.jinja:1:6: 'u' is undefined");
  check_error("{{ u() }}", "{}", ErrorKind::Input, "t.jinja:1:4: 'u' is undefined");
  check_error("{{ u[0] }}", "{}", ErrorKind::Input, "t.jinja:1:5: 'u' is undefined");
  check_error("{{ u|int }}", "{}", ErrorKind::Input, "t.jinja:1:6: 'u' is undefined");
  check_error("{{ u|tojson }}", "{}", ErrorKind::Input, "t.jinja:1:6: Object of type Undefined is not JSON serializable");
}

TEST_CASE("Jinja attribute lookup prefers a dict's methods, item lookup its keys (the sandbox rules)", "[jinja]") {
  CHECK(render("{{ x['items'] }} {{ x.foo }}|{{ x.items is defined }}", R"J({"x": {"items": 5}})J") == "5 |True");
  CHECK(render("{{ x.y.z }}", R"J({"x": {"y": {"z": "deep"}}})J") == "deep");
  CHECK(render("{{ x|attr('role') }}|{{ x.role }}", R"J({"x": {"role": "user"}})J") == "|user");
  CHECK(render("{{ x.append }}|", R"J({"x": [1]})J") == "|");
}

TEST_CASE("Jinja and/or return an operand; a conditional expression without else is undefined", "[jinja]") {
  CHECK(render("{{ 1 or 2 }} {{ 0 or 2 }} {{ 1 and 2 }} {{ 0 and 2 }} {{ none and 1 }} {{ [] or {} }}") == "1 2 2 0 None {}");
  CHECK(render("{{ 1 if true else 2 }} {{ 1 if false else 2 }} {{ 'a' if none }}|{{ 1 if 0 else 2 if 1 else 3 }}") ==
        "1 2 |2");
  CHECK(render("{{ not 1 }} {{ not none }} {{ not [] }} {{ not '' }} {{ not 'a' }} {{ not 0.0 }}") ==
        "False True True True False True");
  CHECK(render("{{ 'a' if 'x' in 'xyz' and not false or none }}") == "a");
}

// ---- methods ----------------------------------------------------------------------------------

TEST_CASE("Jinja string methods behave like Python's str methods", "[jinja]") {
  CHECK(render("{{ 'abc'.upper() }} {{ 'ABC'.lower() }} {{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|"
               "{{ '  x'.lstrip() }}|{{ 'x  '.rstrip() }}|") == "ABC abc x|a|x|x|");
  CHECK(render("{{ 'a,b,c'.split(',') }} {{ 'a b  c'.split() }} {{ '  a b  '.split() }} {{ 'a,b,c'.split(',', 1) }} "
               "{{ 'a,b,c'.rsplit(',', 1) }} {{ ''.split() }} {{ ''.split(',') }} {{ 'a b c'.split(None, 1) }} "
               "{{ 'a b c'.rsplit(None, 1) }}") ==
        "['a', 'b', 'c'] ['a', 'b', 'c'] ['a', 'b'] ['a', 'b,c'] ['a,b', 'c'] [] [''] ['a', 'b c'] ['a b', 'c']");
  CHECK(render("{{ 'hello'.startswith('he') }} {{ 'hello'.startswith(('x','h')) }} {{ 'hello'.endswith('lo') }} "
               "{{ 'hello'.endswith('x') }} {{ 'hello'.startswith('l', 2) }}") == "True True True False True");
  CHECK(render("{{ 'hello'.replace('l', 'L') }} {{ 'hello'.replace('l', 'L', 1) }} {{ 'ab'.replace('', '-') }} "
               "{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} "
               "{{ 'héllo'.find('l') }}") == "heLLo heLlo -a-b- 2 3 -1 2 2");
  CHECK(render("{{ '-'.join(['a','b']) }} {{ ','.join('abc') }} {{ 'Hello World'.title() }} {{ 'hello'.capitalize() }} "
               "{{ 'HeLLo'.swapcase() }} {{ \"they're bill's\".title() }}") ==
        "a-b a,b,c Hello World Hello hEllO They'Re Bill'S");
  CHECK(render("{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ '  '.isspace() }} {{ ''.isdigit() }} {{ 'a1'.isalnum() }} "
               "{{ 'abc'.islower() }} {{ 'ABC'.isupper() }}") == "True True True False True True True");
  CHECK(render("{{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} "
               "{{ 'prefix_x'.removeprefix('prefix_') }}") ==
        "['a', 'b', 'c'] ('a', '=', 'b=c') ('a=b', '=', 'c') x");
  CHECK(render("{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].split('<think>')[-1].strip('\\n') }}",
               R"J({"c": "<think>\nhmm\n</think>\n\nHello"})J") == "Hello|hmm");
}

TEST_CASE("Jinja dict and list methods work and every mutating method is refused", "[jinja]") {
  CHECK(render("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 5) }} {{ d.keys()|list }} {{ d.values()|list }}",
               R"J({"d": {"a": 1, "b": [2]}})J") == "1 None 5 ['a', 'b'] [1, [2]]");
  CHECK(render("{{ [1,2,3].index(2) }} {{ [1,2,2].count(2) }} {{ (1,2).index(2) }}") == "1 2 1");
  check_error("{{ [1,2].append(3) }}", "{}", ErrorKind::Input,
              "t.jinja:1:9: access to attribute 'append' of 'list' object is unsafe.");
  check_error("{{ x.pop() }}", R"J({"x": [1]})J", ErrorKind::Input,
              "t.jinja:1:5: access to attribute 'pop' of 'list' object is unsafe.");
  check_error("{{ {'a':1}.update({}) }}", "{}", ErrorKind::Input,
              "t.jinja:1:11: access to attribute 'update' of 'dict' object is unsafe.");
  check_error("{{ x.foo() }}", R"J({"x": {}})J", ErrorKind::Input, "t.jinja:1:5: 'dict object' has no attribute 'foo'");
  check_unsupported("{{ 'abc {}'.format(1) }}", ErrorKind::Input, "t.jinja:1:12: str.format() is not supported");
}

// ---- filters ----------------------------------------------------------------------------------

TEST_CASE("Jinja tojson is json.dumps(ensure_ascii=False) with indent, separators and sort_keys", "[jinja]") {
  const char* ctx = R"J({"x": {"a": 1, "b": [1, 2.5, null, true, "é\n\"q\"\\"], "c": {}, "d": [], "e": {"f": "<tag>&'"}}})J";
  CHECK(render("{{ x|tojson }}", ctx) ==
        R"J({"a": 1, "b": [1, 2.5, null, true, "é\n\"q\"\\"], "c": {}, "d": [], "e": {"f": "<tag>&'"}})J");
  CHECK(render("{{ x|tojson(indent=2) }}", ctx) ==
        "{\n  \"a\": 1,\n  \"b\": [\n    1,\n    2.5,\n    null,\n    true,\n    \"\xc3\xa9\\n\\\"q\\\"\\\\\"\n  ],\n"
        "  \"c\": {},\n  \"d\": [],\n  \"e\": {\n    \"f\": \"<tag>&'\"\n  }\n}");
  const char* ctx2 = R"J({"x": {"b": "日本\u0001\u007f😀", "a": [1, {"z": 1}]}})J";
  CHECK(render("{{ x|tojson(separators=(',', ':')) }}", ctx2) == "{\"b\":\"日本\\u0001\x7f😀\",\"a\":[1,{\"z\":1}]}");
  CHECK(render("{{ x|tojson(sort_keys=true) }}", ctx2) == "{\"a\": [1, {\"z\": 1}], \"b\": \"日本\\u0001\x7f😀\"}");
  CHECK(render("{{ x|tojson(ensure_ascii=true) }}", ctx2) ==
        R"J({"b": "\u65e5\u672c\u0001\u007f\ud83d\ude00", "a": [1, {"z": 1}]})J");
  CHECK(render("{{ x|tojson(indent='\\t') }}", ctx2) ==
        "{\n\t\"b\": \"日本\\u0001\x7f😀\",\n\t\"a\": [\n\t\t1,\n\t\t{\n\t\t\t\"z\": 1\n\t\t}\n\t]\n}");
  CHECK(render("{{ 'x'|tojson }} {{ 1.0|tojson }} {{ 1e100|tojson }} {{ none|tojson }} {{ (1,2)|tojson }} "
               "{{ {1: 2, true: 3}|tojson }}") == R"J("x" 1.0 1e+100 null [1, 2] {"1": 3})J");
  CHECK(render("{{ t|tojson(indent=4) }}", R"J({"t": {"name": "f", "parameters": {"type": "object"}}})J") ==
        "{\n    \"name\": \"f\",\n    \"parameters\": {\n        \"type\": \"object\"\n    }\n}");
}

TEST_CASE("Jinja text filters: trim, upper, lower, capitalize, title, replace, indent, escape", "[jinja]") {
  CHECK(render("{{ 'hello world'|upper }} {{ 'HeLLo'|lower }} {{ 'hello WORLD'|capitalize }} "
               "{{ 'hello-world foo(bar'|title }} {{ '  x  '|trim }}|{{ 'xxhixx'|trim('x') }} {{ 'aaa'|replace('a', 'b', 2) }}") ==
        "HELLO WORLD hello Hello world Hello-World Foo(Bar x|hi bba");
  CHECK(render("{{ \"they're bill's-x (a\"|title }} {{ messages[0].role|capitalize }}",
               R"J({"messages": [{"role": "user"}]})J") == "They're Bill's-X (A User");
  CHECK(render("{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|"
               "{{ 'x'|indent('>>') }}") == "a\n    b\n\n    c|  a\n  b|a\n  \n  b|x");
  CHECK(render("{{ 'a<b>&\"\\''|e }} {{ 'x'|safe }} {{ 5|string }} {{ [1,[2]]|string }} [{{ 'x'|center(5) }}]") ==
        "a&lt;b&gt;&amp;&#34;&#39; x 5 [1, [2]] [  x  ]");
}

TEST_CASE("Jinja sequence filters: length, first, last, join, sort, unique, reverse, sum, min, max", "[jinja]") {
  CHECK(render("{{ [1,2]|length }} {{ 'héllo'|count }} {{ {'a':1}|length }} {{ x|items|list }} {{ {'b':1,'a':2}|dictsort }}",
               R"J({"x": {"a": 1, "b": 2}})J") == "2 5 1 [('a', 1), ('b', 2)] [('a', 2), ('b', 1)]");
  CHECK(render("{{ [1,2]|join }} {{ [1,2]|join('-') }} {{ x|join(',', attribute='a') }}", R"J({"x": [{"a": 1}, {"a": "b"}]})J") ==
        "12 1-2 1,b");
  CHECK(render("{{ [3,1,2]|sort }} {{ ['b','A','c']|sort }} {{ ['b','A','c']|sort(case_sensitive=true) }} "
               "{{ [3,1,2]|sort(reverse=true) }} {{ x|sort(attribute='n')|map(attribute='v')|list }}",
               R"J({"x": [{"n": 2, "v": "b"}, {"n": 1, "v": "a"}, {"n": 2, "v": "c"}]})J") ==
        "[1, 2, 3] ['A', 'b', 'c'] ['A', 'b', 'c'] [3, 2, 1] ['a', 'b', 'c']");
  CHECK(render("{{ [1,2,2,3,1]|unique|list }} {{ ['a','A','b']|unique|list }} {{ [1,2,3]|reverse|list }} {{ 'abc'|reverse }} "
               "{{ [1,2,3]|first }} {{ [1,2,3]|last }} {{ []|first }}|{{ 'abc'|first }}") ==
        "[1, 2, 3] ['a', 'b'] [3, 2, 1] cba 1 3 |a");
  CHECK(render("{{ [1,2,3]|sum }} {{ x|sum(attribute='n') }} {{ [1.5,2]|sum }} {{ [3,1,2]|min }} {{ [3,1,2]|max }} "
               "{{ ['b','A']|min }} {{ x|max(attribute='n') }}",
               R"J({"x": [{"n": 2}, {"n": 5}, {"n": 1}]})J") == "6 8 3.5 1 3 A {'n': 5}");
  // jinja2 sorts on [key] lists, which compare equal keys (here two undefined ones) without `<`.
  CHECK(render("{{ [3, 1, 2]|sort(attribute='0') }}") == "[3, 1, 2]");
  check_error("{{ x|sort(attribute='n') }}", R"J({"x": [{"v": "a"}, {"v": "b", "n": 1}]})J", ErrorKind::Input,
              "t.jinja:1:6: 'dict object' has no attribute 'n'");
  check_error("{{ ['a','b']|sum(start='') }}", "{}", ErrorKind::Input, "t.jinja:1:14: sum() can't sum strings");
  CHECK(render("{{ range(5)|list }} {{ range(2, 5)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }} {{ range(3)|length }}") ==
        "[0, 1, 2, 3, 4] [2, 3, 4] [10, 7, 4, 1] [] 3");
}

TEST_CASE("Jinja select/reject/selectattr/rejectattr/map, whose results are generators", "[jinja]") {
  const char* ctx = R"J({"x": [{"role": "user", "content": "a", "flag": true}, {"role": "assistant", "content": "b"},
                          {"role": "user", "content": "c"}]})J";
  CHECK(render("{{ x|selectattr('role', 'equalto', 'user')|list|length }} "
               "{{ x|rejectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ x|selectattr('flag')|list }} "
               "{{ x|map(attribute='role')|join(', ') }}",
               ctx) == "2 ['b'] [{'role': 'user', 'content': 'a', 'flag': True}] user, assistant, user");
  CHECK(render("{{ [1,2,3,4]|select('odd')|list }} {{ [1,2,3,4]|reject('even')|list }} {{ [0,1,'',2]|select|list }} "
               "{{ ['a','B']|map('upper')|list }} {{ [1,2,3]|select('>', 1)|list }} {{ [1,2,3]|select('divisibleby', 3)|list }}") ==
        "[1, 3] [1, 3] [1, 2] ['A', 'B'] [2, 3] [3]");
  // A generator is always truthy and has no len(), as in Python.
  CHECK(render("{% if x|selectattr('a') %}yes{% endif %}", R"J({"x": []})J") == "yes");
  check_error("{{ x|selectattr('a')|length }}", R"J({"x": []})J", ErrorKind::Input,
              "t.jinja:1:22: object of type 'generator' has no len()");
  CHECK(render("{{ messages|selectattr('role', 'eq', 'user')|first }}",
               R"J({"messages": [{"role": "system"}, {"role": "user", "c": 1}]})J") == "{'role': 'user', 'c': 1}");
}

TEST_CASE("Jinja conversion filters: int, float, abs, round, default", "[jinja]") {
  CHECK(render("{{ 3.7|int }} {{ '42'|int }} {{ '42.9'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '0x1f'|int(0, 16) }} "
               "{{ ' 12 '|int }} {{ '1_000'|int }} {{ true|int }} {{ none|int }}") == "3 42 42 0 7 31 12 1000 1 0");
  CHECK(render("{{ '3.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ 'inf'|float }} {{ ' 1e3 '|float }}") ==
        "3.5 0.0 3.0 inf 1000.0");
  CHECK(render("{{ -3|abs }} {{ (-3)|abs }} {{ -3.5|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} "
               "{{ 3.14159|round(2) }} {{ 3.1|round(0, 'ceil') }} {{ 3.9|round(method='floor') }} {{ 5|round }}") ==
        "3 3 3.5 2.0 4.0 2.67 3.14 4.0 3.0 5");
  CHECK(render("{{ u|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }} "
               "{{ 0|d('z', true) }}") == "d  d None z");
}

// ---- tests ------------------------------------------------------------------------------------

TEST_CASE("Jinja tests: defined, none, types, sameas, comparisons, odd/even/divisibleby, lower/upper", "[jinja]") {
  CHECK(render("{{ 5 is odd }} {{ 4 is even }} {{ 6 is divisibleby 3 }} {{ 6 is divisibleby(4) }} {{ none is none }} "
               "{{ 1 is number }} {{ true is number }} {{ 1.0 is float }} {{ 1 is integer }} {{ true is integer }} "
               "{{ 'a' is string }} {{ {} is mapping }} {{ [] is sequence }} {{ 'a' is sequence }} {{ 1 is iterable }}") ==
        "True True True False True True True True True False True True True True False");
  CHECK(render("{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ true is boolean }} "
               "{{ x is defined }} {{ y is undefined }} {{ x is not none }} {{ x is sameas 1 }} {{ none is sameas none }} "
               "{{ 'A' is upper }} {{ 'a' is lower }} {{ 2 is in [1,2] }} {{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} "
               "{{ 2 is ge 2 }} {{ 'upper' is filter }} {{ 'odd' is test }}",
               R"J({"x": 1})J") ==
        "True False True False True True True True True True True True True True True True True True True");
  CHECK(render("{{ u is sequence }} {{ u is iterable }} {{ u is callable }} {{ {} is sequence }}") == "True True True True");
  CHECK(render("{% if enable_thinking is defined and enable_thinking is false %}off{% endif %}",
               R"J({"enable_thinking": false})J") == "off");
}

// ---- statements -------------------------------------------------------------------------------

TEST_CASE("Jinja for loops: loop variables, else, filters, unpacking, break and continue", "[jinja]") {
  CHECK(render("{% for x in [1,2,3] %}{{ loop.index }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}"
               "{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a','b') }};{% endfor %}") ==
        "13TrueFalse2a;22FalseFalse13b;31FalseTrue2a;");
  CHECK(render("{% for x in [1,2,3] %}{{ loop.index0 }}{{ loop.revindex0 }}{{ loop.length }}{% if not loop.last %},{% endif %}"
               "{% endfor %}") == "023,113,203");
  CHECK(render("{% for x in [1,2,3] if x > 1 %}{{ loop.index }}/{{ loop.length }}{% endfor %}") == "1/22/2");
  CHECK(render("{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in [1] if x > 5 %}a{% else %}filtered{% endfor %}") ==
        "empty|filtered");
  CHECK(render("{% for a, b in [[1,2],[3,4]] %}{{ a }}{{ b }}{% endfor %}{% for k, v in {'x': 1}.items() %}{{ k }}={{ v }}"
               "{% endfor %}") == "1234x=1");
  CHECK(render("{% for k, v in d|dictsort %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}"
               "{% for c in 'ab' %}[{{ c }}]{% endfor %}",
               R"J({"d": {"b": 2, "a": 1}})J") == "a=1;b=2;ba[a][b]");
  CHECK(render("{% for x in [1,2,3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}|{% for x in [1,2,3] %}"
               "{% if x == 2 %}{% break %}{% endif %}{{ x }}{% else %}E{% endfor %}") == "13|1");
  CHECK(render("{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}") ==
        "113 214 1|123 224 2|");
  CHECK(render("{% for x in [1] %}{{ loop }}{% endfor %}") == "<LoopContext 1/1>");
  CHECK(render("{% for x in [1,1,2,2,3] %}{{ loop.changed(x) }} {% endfor %}") == "True False True False True ");
  check_error("{% for a, b in [[1,2,3]] %}{% endfor %}", "{}", ErrorKind::Input,
              "t.jinja:1:8: too many values to unpack (expected 2)");
  check_error("{% for x in 5 %}{% endfor %}", "{}", ErrorKind::Input, "t.jinja:1:13: 'int' object is not iterable");
}

TEST_CASE("Jinja scoping: set in a loop does not leak, a namespace does; macros and blocks are scopes", "[jinja]") {
  CHECK(render("{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i %}{% endfor %}{{ x }}") == "0000");
  CHECK(render("{% set found = false %}{% for m in ms %}{% if m == 2 %}{% set found = true %}{% endif %}{% endfor %}{{ found }}",
               R"J({"ms": [1,2,3]})J") == "False");
  CHECK(render("{% set ns = namespace(found=false) %}{% for m in ms %}{% if m == 2 %}{% set ns.found = true %}{% endif %}"
               "{% endfor %}{{ ns.found }}",
               R"J({"ms": [1,2,3]})J") == "True");
  CHECK(render("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}") == "2");
  CHECK(render("{% set x = 5 %}{% macro m() %}{% set x = 7 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}") == "75");
  CHECK(render("{% macro m() %}{{ x }}{% endmacro %}{{ m() }}{% set x = 1 %}{{ m() }}{% set x = 2 %}{{ m() }}") == "12");
  CHECK(render("{% for a in [1,2] %}{% macro m() %}{{ a }}{% endmacro %}{{ m() }}{% endfor %}") == "12");
  CHECK(render("{% generation %}{% set x = 1 %}{% endgeneration %}[{{ x }}]") == "[]");
  CHECK(render("{% filter upper %}{% set x = 1 %}a{% endfilter %}[{{ x }}]") == "A[]");
  CHECK(render("{% for i in [] %}{% else %}{% set x = 1 %}{% endfor %}[{{ x }}]") == "[]");
  CHECK(render("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]") == "3[]");
  check_error("{% set d = {'a': 1} %}{% set d.a = 2 %}", "{}", ErrorKind::Input,
              "t.jinja:1:30: cannot assign attribute on non-namespace object");
}

TEST_CASE("Jinja set blocks, tuple assignment, filter blocks and generation blocks", "[jinja]") {
  CHECK(render("{% set x %}captured {{ 1 + 1 }}{% endset %}[{{ x }}]{% set y | upper %}up{% endset %}{{ y }}") ==
        "[captured 2]UP");
  CHECK(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = [3, 4] %}{{ c }}{{ d }}{% set t = 1, 2 %}{{ t }}") ==
        "1234(1, 2)");
  CHECK(render("{% filter upper %}hello {{ 'world' }}{% endfilter %}{% filter trim|upper %}  x  {% endfilter %}") ==
        "HELLO WORLDX");
  CHECK(render("{% generation %}gen {{ 1 }}{% endgeneration %}") == "gen 1");
  CHECK(render("{%- generation -%}  x  {%- endgeneration -%}") == "x");
  CHECK(render("{% if a %}A{% elif b %}B{% elif c %}C{% else %}D{% endif %}", R"J({"c": 1})J") == "C");
}

TEST_CASE("Jinja macros: defaults, keyword arguments, varargs and kwargs, recursion, caller", "[jinja]") {
  CHECK(render("{% macro greet(name, greeting='Hello') -%}\n{{ greeting }}, {{ name }}!\n{%- endmacro %}"
               "{{ greet('Bob') }} {{ greet('Al', greeting='Hi') }} {{ greet(name='X') }}") ==
        "Hello, Bob! Hi, Al! Hello, X!");
  CHECK(render("{% macro m(a, b=2) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, 3) }}{{ m(b=5, a=4) }}{{ m() }}") ==
        "1213452");
  CHECK(render("{% macro m(a, b) %}{{ a }}|{{ b }}|{{ b is defined }}{% endmacro %}{{ m(1) }}") == "1||False");
  CHECK(render("{% macro m(a, b=a+1) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}") == "12");
  CHECK(render("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, c=3) }}") == "1(2,){'c': 3}");
  CHECK(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}") == "54321");
  CHECK(render("{% macro m(a, b, c=3) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(*[1, 2], **{'c': 4}) }} "
               "{{ 'x'|replace(*['x', 'y']) }} {{ dict(a=1, **{'b': 2}) }}") == "124 y {'a': 1, 'b': 2}");
  CHECK(render("{% macro m() %}{{ caller is defined }}{{ caller }}{% endmacro %}{{ m() }}") == "False");
  CHECK(render("{% macro m(a) %}[{{ caller() }}]{% endmacro %}{% call m(1) %}body{% endcall %}") == "[body]");
  CHECK(render("{% macro m(a) %}[{{ caller(5) }}]{% endmacro %}{% call(x) m(1) %}body{{ x }}{% endcall %}") == "[body5]");
  CHECK(render("{% macro render_list(items) %}<ul>{% for i in items %}<li>{{ caller(i) }}</li>{% endfor %}</ul>{% endmacro %}"
               "{% call(item) render_list([1,2]) %}#{{ item }}{% endcall %}") == "<ul><li>#1</li><li>#2</li></ul>");
  check_error("{{ dict(**{'a': 1}, b=2) }}", "{}", ErrorKind::Format, "t.jinja:1:21: invalid syntax for function call");
  check_error("{{ dict(**[1]) }}", "{}", ErrorKind::Input, "t.jinja:1:11: argument after ** must be a mapping, not list");
  check_error("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", "{}", ErrorKind::Input,
              "t.jinja:1:41: macro 'm' takes not more than 1 argument(s)");
  check_error("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(c=2) }}", "{}", ErrorKind::Input,
              "t.jinja:1:41: macro 'm' takes no keyword argument 'c'");
  check_error("{% macro m(a) %}[]{% endmacro %}{% call m(1) %}body{% endcall %}", "{}", ErrorKind::Input,
              "t.jinja:1:36: macro 'm' was invoked with two values for the special caller argument");
}

TEST_CASE("Jinja globals: range, dict, namespace, raise_exception, strftime_now at Options::now_unix", "[jinja]") {
  CHECK(render("{% set ns = namespace(a=1, b='x') %}{% set ns.a = ns.a + 1 %}{{ ns.a }}{{ ns.b }}") == "2x");
  CHECK(render("{{ dict(a=1, b=2) }} {{ dict({'x': 1}, y=2) }} {{ dict([['k', 'v']]) }}") ==
        "{'a': 1, 'b': 2} {'x': 1, 'y': 2} {'k': 'v'}");
  Options at;
  at.now_unix = 1721952000;  // 2024-07-26 00:00:00 UTC
  CHECK(render_with("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M') }}", "{}", at) ==
        "26 Jul 2024|2024-07-26 00:00");
  CHECK_FALSE(render("{{ strftime_now('%Y') }}").empty());  // the clock
  check_error("{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}", "{}",
              ErrorKind::Input, "t.jinja:1:4: Conversation roles must alternate user/assistant/user/assistant/...");
  check_error("{{ namespace(_x=1) }}", "{}", ErrorKind::Input,
              "t.jinja:1:4: Chat templates cannot store underscore-prefixed attributes on a namespace");
  check_error("{% set ns = namespace() %}{% set ns._y = 1 %}", "{}", ErrorKind::Input,
              "t.jinja:1:34: Chat templates cannot store underscore-prefixed attributes on a namespace");
}

// ---- chat templates in the styles of real checkpoints -----------------------------------------

TEST_CASE("Jinja renders a Qwen3-style template: reversed scan with namespace, think splitting, tools", "[jinja]") {
  const std::string tpl =
      "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}"
      "{%- endfor %}{{- '\\n</tools><|im_end|>\\n' }}{%- endif %}\n"
      "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
      "{%- for message in messages[::-1] %}\n"
      "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
      "    {%- if ns.multi_step_tool and message.role == \"user\" and message.content is string and "
      "not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n"
      "        {%- set ns.multi_step_tool = false %}\n"
      "        {%- set ns.last_query_index = index %}\n"
      "    {%- endif %}\n"
      "{%- endfor %}\n"
      "{%- for message in messages %}\n"
      "    {%- set content = message.content if message.content is string else '' %}\n"
      "    {%- if message.role == \"user\" %}\n"
      "        {{- '<|im_start|>user\\n' + content + '<|im_end|>\\n' }}\n"
      "    {%- elif message.role == \"assistant\" %}\n"
      "        {%- set reasoning_content = '' %}\n"
      "        {%- if '</think>' in content %}\n"
      "            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
      "            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n"
      "        {%- endif %}\n"
      "        {%- if loop.index0 > ns.last_query_index %}\n"
      "            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content }}\n"
      "        {%- else %}\n"
      "            {{- '<|im_start|>assistant\\n' + content }}\n"
      "        {%- endif %}\n"
      "        {%- for tool_call in message.tool_calls or [] %}\n"
      "            {%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}\n"
      "            {{- '\\n<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' }}\n"
      "            {{- tool_call.arguments if tool_call.arguments is string else tool_call.arguments | tojson }}\n"
      "            {{- '}\\n</tool_call>' }}\n"
      "        {%- endfor %}\n"
      "        {{- '<|im_end|>\\n' }}\n"
      "    {%- endif %}\n"
      "{%- endfor %}\n"
      "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
      "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
      "{%- endif %}\n";
  CHECK(render(tpl, R"J({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!"},
                  {"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "<think>\nlook</think>Sun.",
                  "tool_calls": [{"function": {"name": "w", "arguments": {"city": "Paris"}}}]}],
                  "tools": [{"name": "w", "description": "weather <fast> & \"good\""}], "add_generation_prompt": true,
                  "enable_thinking": false})J") ==
        "<|im_start|>system\n# Tools\n<tools>\n{\"name\": \"w\", \"description\": \"weather <fast> & \\\"good\\\"\"}\n"
        "</tools><|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\nlook\n</think>\n\nSun.\n<tool_call>\n"
        "{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>assistant\n"
        "<think>\n\n</think>\n\n");
}

TEST_CASE("Jinja renders a Llama-3.1-style template: date default, trimmed system, tools in the user message", "[jinja]") {
  const std::string tpl =
      "{{- bos_token }}\n"
      "{%- if not tools_in_user_message is defined %}{%- set tools_in_user_message = true %}{%- endif %}\n"
      "{%- if not date_string is defined %}{%- set date_string = strftime_now(\"%d %b %Y\") %}{%- endif %}\n"
      "{%- if messages[0]['role'] == 'system' %}\n"
      "    {%- set system_message = messages[0]['content']|trim %}\n"
      "    {%- set messages = messages[1:] %}\n"
      "{%- else %}\n"
      "    {%- set system_message = \"\" %}\n"
      "{%- endif %}\n"
      "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\nToday Date: \" + date_string + \"\\n\\n\" }}\n"
      "{{- system_message + \"<|eot_id|>\" }}\n"
      "{%- if tools_in_user_message and not tools is none %}\n"
      "    {%- if messages | length != 0 %}\n"
      "        {%- set first_user_message = messages[0]['content']|trim %}\n"
      "        {%- set messages = messages[1:] %}\n"
      "    {%- else %}\n"
      "        {{- raise_exception(\"Cannot put tools in the first user message when there's no first user message!\") }}\n"
      "    {%- endif %}\n"
      "    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n"
      "    {%- for t in tools %}{{- t | tojson(indent=4) }}{{- \"\\n\\n\" }}{%- endfor %}\n"
      "    {{- first_user_message + \"<|eot_id|>\"}}\n"
      "{%- endif %}\n"
      "{%- for message in messages %}\n"
      "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n"
      "{%- endfor %}\n"
      "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}\n";
  CHECK(render(tpl, R"J({"bos_token": "<|begin_of_text|>", "tools": null, "add_generation_prompt": true,
                  "date_string": "26 Jul 2024", "messages": [{"role": "system", "content": "  Be brief.  "},
                  {"role": "user", "content": "Hi there "}]})J") ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK(render(tpl, R"J({"bos_token": "<s>", "date_string": "1 Jan 2025", "tools": [{"name": "f", "parameters": {"x": 1}}],
                  "messages": [{"role": "user", "content": " q "}]})J") ==
        "<s><|start_header_id|>system<|end_header_id|>\n\nToday Date: 1 Jan 2025\n\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n{\n    \"name\": \"f\",\n    \"parameters\": {\n        \"x\": 1\n    }\n}"
        "\n\nq<|eot_id|>");
  check_error(tpl, R"J({"bos_token": "<s>", "tools": [{"a": 1}], "messages": [{"role": "system", "content": "s"}]})J",
              ErrorKind::Input, "t.jinja:17:13: Cannot put tools in the first user message when there's no first user message!");
}

TEST_CASE("Jinja renders a Gemma-3-style template: alternation check, first_user_prefix, image items", "[jinja]") {
  const std::string tpl =
      "{{ bos_token }}\n"
      "{%- if messages[0]['role'] == 'system' -%}\n"
      "    {%- set first_user_prefix = (messages[0]['content'] if messages[0]['content'] is string "
      "else messages[0]['content'][0]['text']) + '\\n\\n' -%}\n"
      "    {%- set loop_messages = messages[1:] -%}\n"
      "{%- else -%}\n"
      "    {%- set first_user_prefix = \"\" -%}\n"
      "    {%- set loop_messages = messages -%}\n"
      "{%- endif -%}\n"
      "{%- for message in loop_messages -%}\n"
      "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
      "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
      "    {%- endif -%}\n"
      "    {%- set role = \"model\" if message['role'] == 'assistant' else message['role'] -%}\n"
      "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
      "    {%- if message['content'] is string -%}\n"
      "        {{ message['content'] | trim }}\n"
      "    {%- else -%}\n"
      "        {%- for item in message['content'] -%}\n"
      "            {%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}\n"
      "            {%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}\n"
      "        {%- endfor -%}\n"
      "    {%- endif -%}\n"
      "    {{ '<end_of_turn>\\n' }}\n"
      "{%- endfor -%}\n"
      "{%- if add_generation_prompt -%}{{'<start_of_turn>model\\n'}}{%- endif -%}\n";
  CHECK(render(tpl, R"J({"bos_token": "<bos>", "add_generation_prompt": true, "messages": [
                  {"role": "system", "content": [{"type": "text", "text": "Sys"}]},
                  {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " Describe. "}]},
                  {"role": "assistant", "content": "A cat."}]})J") ==
        "<bos><start_of_turn>user\nSys\n\n<start_of_image>Describe.<end_of_turn>\n<start_of_turn>model\nA cat.<end_of_turn>\n"
        "<start_of_turn>model\n");
  check_error(tpl, R"J({"bos_token": "<bos>", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})J",
              ErrorKind::Input, "t.jinja:11:12: Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST_CASE("Jinja renders a Qwen2-VL-style template: namespace counters and vision ids", "[jinja]") {
  const std::string tpl =
      "{% set image_count = namespace(value=0) %}{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
      "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
      "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
      "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
      "<|vision_start|><|image_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}"
      "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  CHECK(render(tpl, R"J({"add_generation_prompt": true, "add_vision_id": true, "messages": [{"role": "user", "content": [
                  {"type": "image"}, {"type": "image_url", "image_url": "x"}, {"type": "text", "text": "Compare."}]},
                  {"role": "assistant", "content": "Same."}, {"role": "user", "content": [{"image": "y"}, {"text": "And?"}]}]})J") ==
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "Picture 1: <|vision_start|><|image_pad|><|vision_end|>Picture 2: <|vision_start|><|image_pad|><|vision_end|>Compare."
        "<|im_end|>\n<|im_start|>assistant\nSame.<|im_end|>\n<|im_start|>user\n"
        "Picture 3: <|vision_start|><|image_pad|><|vision_end|>And?<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("Jinja renders SmolVLM-, Mistral- and Phi-3-style templates", "[jinja]") {
  const std::string smolvlm =
      "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'][0]['type'] == 'image' %}"
      "{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
      "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
      "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";
  CHECK(render(smolvlm, R"J({"add_generation_prompt": true, "messages": [{"role": "user", "content": [{"type": "image"},
                  {"type": "text", "text": "What is this?"}]}, {"role": "assistant", "content": [{"type": "text", "text": "A circle."}]}]})J") ==
        "<|im_start|>User:<image>What is this?<end_of_utterance>\nAssistant: A circle.<end_of_utterance>\nAssistant:");
  const std::string mistral =
      "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n"
      "    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n\n"
      "{{- bos_token }}\n{%- for message in loop_messages %}\n"
      "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
      "        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\n    {%- endif %}\n"
      "    {%- if message['role'] == 'user' %}\n        {%- if loop.first and system_message is defined %}\n"
      "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n        {%- else %}\n"
      "            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n"
      "    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n    {%- endif %}\n"
      "{%- endfor %}\n";
  CHECK(render(mistral, R"J({"bos_token": "<s>", "eos_token": "</s>", "messages": [{"role": "system", "content": "S"},
                  {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]})J") ==
        "<s> [INST] S\n\na [/INST] b</s> [INST] c [/INST]");
  check_error(mistral, R"J({"bos_token": "<s>", "eos_token": "</s>", "messages": [{"role": "assistant", "content": "a"}]})J",
              ErrorKind::Input, "t.jinja:11:13: Conversation roles must alternate");
  const std::string phi3 =
      "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
      "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}"
      "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";
  CHECK(render(phi3, R"J({"eos_token": "<|endoftext|>", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})J") ==
        "<|user|>\na<|end|>\n<|assistant|>\nb<|end|>\n<|endoftext|>");
}

TEST_CASE("Jinja renders a DeepSeek-style template: namespace flags across tool calls and outputs", "[jinja]") {
  const std::string tpl =
      "{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}"
      "{%- for message in messages %}{%- if message['role'] == 'system' %}{% set ns.system_prompt = message['content'] %}"
      "{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}"
      "{%- for message in messages %}"
      "{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{ '<U>' + message['content'] }}{%- endif %}"
      "{%- if message['role'] == 'assistant' and message['content'] is none %}{%- for tool in message['tool_calls'] %}"
      "{%- if not ns.is_first %}{{ '<A><calls>' + tool['function']['name'] }}{%- set ns.is_first = true -%}"
      "{%- else %}{{ '\\n' + tool['function']['name'] }}{%- endif %}{%- endfor %}{{ '</calls>' }}{%- endif %}"
      "{%- if message['role'] == 'assistant' and message['content'] is not none %}"
      "{%- if ns.is_tool %}{{ '</outs>' + message['content'] }}{%- set ns.is_tool = false -%}"
      "{%- else %}{% set content = message['content'] %}{% if '</think>' in content %}"
      "{% set content = content.split('</think>')[-1] %}{% endif %}{{ '<A>' + content }}{%- endif %}{%- endif %}"
      "{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}"
      "{{ '<outs>' + message['content'] }}{%- set ns.is_output_first = false %}{%- else %}{{ '\\n' + message['content'] }}"
      "{%- endif %}{%- endif %}"
      "{%- endfor -%}{% if ns.is_tool %}{{ '</outs>' }}{% endif %}{% if add_generation_prompt and not ns.is_tool %}{{ '<A>' }}{% endif %}";
  CHECK(render(tpl, R"J({"bos_token": "<bos>", "add_generation_prompt": true, "messages": [{"role": "system", "content": "Sys."},
                  {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "<think>easy</think>4"},
                  {"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "w"}}, {"function": {"name": "v"}}]},
                  {"role": "tool", "content": "sun"}, {"role": "tool", "content": "rain"}, {"role": "assistant", "content": "Done."}]})J") ==
        "<bos>Sys.<U>2+2?<A>4<A><calls>w\nv</calls><outs>sun\nrain</outs>Done.<A>");
}

TEST_CASE("Jinja renders Granite/Command-R-style macros: recursive type rendering and a caller wrapper", "[jinja]") {
  const std::string tpl =
      "{%- macro json_type(spec) %}\n"
      "{%- set basic = {\"string\": \"str\", \"number\": \"float\", \"integer\": \"int\", \"boolean\": \"bool\"} %}\n"
      "{%- if basic[spec.type] is defined %}{{- basic[spec.type] }}\n"
      "{%- elif spec.type == \"array\" %}{{- \"list[\" + json_type(spec['items']) + \"]\" }}\n"
      "{%- elif spec.type == \"object\" and spec.additionalProperties is defined %}"
      "{{- \"dict[str, \" + json_type(spec.additionalProperties) + ']' }}\n"
      "{%- elif spec.type is iterable and spec.type is not string %}{{- \"Union[\" }}"
      "{%- for t in spec.type %}{{- json_type({\"type\": t}) }}{%- if not loop.last %}{{- \",\" }}{%- endif %}{%- endfor %}"
      "{{- \"]\" }}\n"
      "{%- else %}{{- \"Any\" }}{%- endif %}\n"
      "{%- endmacro %}\n"
      "{%- macro wrap(tag) -%}<{{ tag }}>{{ caller() }}</{{ tag }}>{%- endmacro %}\n"
      "{%- call wrap('tools') %}{%- for name, p in tool.parameters.properties|items %}"
      "{{ name }}: {{ json_type(p) }}{% if not loop.last %}, {% endif %}{%- endfor %}{%- endcall %}\n"
      "{%- for message in messages %}{%- call wrap(message.role | upper) %}{{ message.content | trim }}{% endcall %}{% endfor %}";
  CHECK(render(tpl, R"J({"messages": [{"role": "user", "content": " Find it. "}], "tool": {"parameters": {"properties": {
                  "city": {"type": "string"}, "days": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}},
                  "opts": {"type": "object", "additionalProperties": {"type": "number"}}, "v": {"type": ["string", "null"]},
                  "x": {}}}}})J") ==
        // `x` has no type: an undefined is iterable and not a string, hence jinja2's "Union[]".
        "<tools>city: str, days: int, tags: list[str], opts: dict[str, float], v: Union[str,Any], x: Union[]</tools>"
        "<USER>Find it.</USER>");
}

// ---- errors -----------------------------------------------------------------------------------

TEST_CASE("Jinja syntax errors are Error{Format} naming the template, line and column", "[jinja]") {
  check_error("{% for %}", "{}", ErrorKind::Format, "t.jinja:1:8: expected an assignment target");
  check_error("line\n{% if x %}", "{}", ErrorKind::Format, "t.jinja:2:4: the 'if' block is not closed");
  check_error("{{ x", "{}", ErrorKind::Format, "t.jinja:1:1: unexpected end of template");
  check_error("{{ 1 + }}", "{}", ErrorKind::Format, "t.jinja:1:8: unexpected '}}'");
  check_error("a\n  {{ (1 ]] }}", "{}", ErrorKind::Format, "t.jinja:2:9: unexpected ']', expected ')'");
  check_error("{% if true %}{% endfor %}", "{}", ErrorKind::Format,
              "t.jinja:1:17: unexpected 'endfor' inside the 'if' block opened at 1:4");
  check_error("{% endif %}", "{}", ErrorKind::Format, "t.jinja:1:4: unexpected 'endif': no block is open");
  check_error("{# never closed", "{}", ErrorKind::Format, "t.jinja:1:1: missing end of comment tag");
  check_error("{% raw %}never closed", "{}", ErrorKind::Format, "t.jinja:1:1: missing end of raw directive");
  check_error("{{ 'unterminated }}", "{}", ErrorKind::Format, "t.jinja:1:4: unterminated string literal");
  check_error("{{ a ! b }}", "{}", ErrorKind::Format, "t.jinja:1:6: unexpected character '!'");
  check_error("{% break %}", "{}", ErrorKind::Format, "t.jinja:1:4: 'break' outside a for loop");
  check_error("{% macro m(a=1, b) %}{% endmacro %}", "{}", ErrorKind::Format,
              "t.jinja:1:17: non-default argument follows default argument");
  CHECK(render("{% macro m(caller) %}{% endmacro %}{{ m(1) }}ok") == "ok");  // a plain parameter while unused
  check_error("{% macro m(caller) %}{{ caller }}{% endmacro %}", "{}", ErrorKind::Format,
              "t.jinja:1:4: When defining macros or call blocks the special \"caller\" argument must be omitted");
  check_error("{% set true = 1 %}", "{}", ErrorKind::Format, "t.jinja:1:8: can't assign to the constant 'true'");
}

TEST_CASE("Jinja unknown filters and tests are parse-time errors, except where jinja2 defers them", "[jinja]") {
  check_error("{{ x|nope }}", "{}", ErrorKind::Format, "t.jinja:1:6: unknown filter 'nope'");
  check_error("{{ x is nope }}", "{}", ErrorKind::Format, "t.jinja:1:9: unknown test 'nope'");
  check_error("{% if x %}{% for i in [] %}{{ i|nope }}{% endfor %}{% endif %}", "{}", ErrorKind::Format,
              "t.jinja:1:33: unknown filter 'nope'");
  check_error("{% if x %}{% macro m() %}{{ 1|nope }}{% endmacro %}{% endif %}", "{}", ErrorKind::Format,
              "t.jinja:1:31: unknown filter 'nope'");
  // Inside an `if` or a conditional expression jinja2 raises only when the code runs.
  CHECK(render("{% if false %}{{ x|nope }}{% endif %}ok") == "ok");
  CHECK(render("{{ x|nope if false else 1 }}") == "1");
  check_error("{% if true %}{{ x|nope }}{% endif %}", "{}", ErrorKind::Input, "t.jinja:1:19: unknown filter 'nope'");
  check_error("{% if x is nope %}{% endif %}", "{}", ErrorKind::Input, "t.jinja:1:12: unknown test 'nope'");
}

TEST_CASE("Jinja unknown and unsupported tags are Error{Format}", "[jinja]") {
  check_error("{% frobnicate %}", "{}", ErrorKind::Format, "t.jinja:1:4: unknown tag 'frobnicate'");
  check_error("{% include 'x' %}", "{}", ErrorKind::Format, "t.jinja:1:4: the '{% include %}' tag is not supported");
  check_unsupported("{% extends 'base' %}", ErrorKind::Format, "t.jinja:1:4: the '{% extends %}' tag is not supported");
  check_unsupported("{% import 'm' as m %}", ErrorKind::Format, "t.jinja:1:4: the '{% import %}' tag is not supported");
  check_unsupported("{% for x in [1] recursive %}{% endfor %}", ErrorKind::Format,
                    "t.jinja:1:17: recursive for loops are not supported");
  check_unsupported("{{ [1,2,3]|batch(2)|list }}", ErrorKind::Format, "t.jinja:1:12: unknown filter 'batch'");
}

TEST_CASE("Jinja raise_exception, undefined use and type errors are Error{Input} at the construct", "[jinja]") {
  check_error("{% if true %}\n  {{ raise_exception('boom: ' ~ 1) }}\n{% endif %}", "{}", ErrorKind::Input, "t.jinja:2:6: boom: 1");
  check_error("{{ messages[0]['content'] }}", R"J({"messages": []})J", ErrorKind::Input,
              "t.jinja:1:15: list object has no element 0");
  check_error("{{ 'a' < 1 }}", "{}", ErrorKind::Input, "t.jinja:1:8: '<' not supported between instances of 'str' and 'int'");
  check_error("{% for x in none %}{% endfor %}", "{}", ErrorKind::Input, "t.jinja:1:13: 'NoneType' object is not iterable");
  check_error("{{ 'x'|indent(none) }}", "{}", ErrorKind::Input, "t.jinja:1:8: can't multiply sequence by non-int");
}

TEST_CASE("Jinja bounds: infinite macro recursion, huge ranges, step and output limits", "[jinja]") {
  check_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", ErrorKind::Input,
              "t.jinja:1:20: macro 'f' recursed too deeply (more than 256 nested calls)");
  // jinja2's sandbox refuses ranges over 100000 items up front, so range(10**12) never allocates.
  check_error("{% for i in range(10**12) %}{% endfor %}", "{}", ErrorKind::Input,
              "t.jinja:1:13: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  Options small;
  small.limits.max_steps = 100000;
  const Error steps = failure_with("{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}", "{}", small);
  CHECK(steps.kind() == ErrorKind::Input);
  CHECK_THAT(steps.what(), Catch::StartsWith("t.jinja:1:") && Catch::Contains("more than 100000 steps"));
  small.limits.max_output_bytes = 1000;
  const Error output = failure_with("{% for a in range(1000) %}xx{% endfor %}", "{}", small);
  CHECK_THAT(output.what(), Catch::StartsWith("t.jinja:1:27: the output exceeds 1000 bytes"));
  CHECK_THAT(failure_with("{{ 'x' * 10**12 }}", "{}", Options{}).what(),
             Catch::StartsWith("t.jinja:1:8: string repetition would exceed the output limit"));
  CHECK_THAT(failure_with("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                          "{}", Options{}).what(),
             Catch::Contains("string concatenation would exceed the output limit"));
  Options tiny;
  tiny.limits.max_source_bytes = 10;
  const Error big = failure_with("{{ 'this is more than ten bytes' }}", "{}", tiny);
  CHECK(big.kind() == ErrorKind::Input);
  CHECK_THAT(big.what(), Catch::StartsWith("t.jinja:1:1: the template is 35 bytes, over the limit of 10 bytes"));
}

TEST_CASE("Jinja deep nesting is a clear error, never a C++ stack overflow", "[jinja]") {
  const std::string parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  CHECK_THAT(failure_with(parens, "{}", Options{}).what(),
             Catch::StartsWith("t.jinja:1:") && Catch::Contains("nests too deeply (more than 512 levels)"));
  std::string ifs;
  for (int i = 0; i < 100000; ++i) ifs += "{% if true %}";
  CHECK_THAT(failure_with(ifs, "{}", Options{}).what(), Catch::Contains("nests too deeply"));
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  CHECK_THAT(failure_with(chain + " }}", "{}", Options{}).what(), Catch::Contains("nests too deeply"));
  std::string filters = "{{ 'x'";
  for (int i = 0; i < 100000; ++i) filters += "|trim";
  CHECK_THAT(failure_with(filters + " }}", "{}", Options{}).what(), Catch::Contains("nests too deeply"));
  std::string nots = "{{ ";
  for (int i = 0; i < 100000; ++i) nots += "not ";
  CHECK_THAT(failure_with(nots + "1 }}", "{}", Options{}).what(), Catch::Contains("nests too deeply"));
  // Nesting within the limit works; so does a long flat `~` chain.
  CHECK(render("{{ " + std::string(200, '(') + "1" + std::string(200, ')') + " }}") == "1");
  std::string concat = "{{ 'a'";
  for (int i = 0; i < 10000; ++i) concat += " ~ 'a'";
  CHECK(render(concat + " }}") == std::string(10001, 'a'));
  // Recursion through macros is bounded by Limits::max_eval_depth when max_call_depth allows more.
  Options deep;
  deep.limits.max_call_depth = 1 << 30;
  CHECK_THAT(failure_with("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(100000) }}", "{}", deep)
                 .what(),
             Catch::Contains("nests too deeply while rendering"));
  // A namespace may hold itself: repr prints it the way CPython does.
  CHECK(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}") == "<Namespace {'me': <Namespace {...}>}>");
}

TEST_CASE("Jinja parses and renders 10 MB templates in linear time", "[jinja]") {
  const size_t size = 10u << 20;
  std::string plain;
  while (plain.size() < size) plain += "Plain text line with {braces}, 100% and # signs.\n";
  const std::string unit = "{{ x }}{% if x %}a{% endif %}{# c #}\n";  // renders "1a": the comment eats the newline
  std::string tags;
  while (tags.size() < size) tags += unit;
  const auto start = std::chrono::steady_clock::now();
  CHECK(render(plain).size() == plain.size() - 1);  // the trailing newline is dropped
  const std::string out = render(tags, R"J({"x": 1})J");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(out.size() == tags.size() / unit.size() * 2);
  CHECK(seconds < 30.0);  // about a second in a release build; quadratic behaviour would take hours
}

TEST_CASE("Jinja refuses context integers beyond 64 bits instead of rounding them", "[jinja]") {
  const Error e = failure_with("{{ x|tojson }}", R"J({"x": [1, 12345678901234567890]})J", Options{});
  CHECK(e.kind() == ErrorKind::Input);
  CHECK_THAT(e.what(), Catch::StartsWith("t.jinja:1:1: context variable 'x': the integer 12345678901234567890 does not fit"));
  CHECK(render("{{ x|tojson }}", R"J({"x": [-9223372036854775808, 9223372036854775807]})J") ==
        "[-9223372036854775808, 9223372036854775807]");
}

TEST_CASE("Jinja Template::render needs an object context and can run on several threads at once", "[jinja]") {
  const Template tpl = Template::parse("{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}", "t.jinja");
  CHECK(tpl.name() == "t.jinja");
  const Error e = [&] {
    try {
      tpl.render(json::array());
    } catch (const Error& err) {
      return err;
    }
    return Error(ErrorKind::Internal, "no error");
  }();
  CHECK(e.kind() == ErrorKind::Input);
  CHECK_THAT(e.what(), Catch::StartsWith("t.jinja:1:1: the render context must be a JSON object"));
  std::vector<std::string> outputs(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < outputs.size(); ++t) {
    threads.emplace_back([&, t] {
      json ctx = {{"messages", json::array()}};
      for (int i = 0; i < 200; ++i) ctx["messages"].push_back({{"role", "user"}, {"content", std::to_string(t)}});
      for (int i = 0; i < 20; ++i) outputs[t] = tpl.render(ctx);
    });
  }
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < outputs.size(); ++t) {
    std::string expected;
    for (int i = 0; i < 200; ++i) expected += "user:" + std::to_string(t) + ";";
    CHECK(outputs[t] == expected);
  }
}
