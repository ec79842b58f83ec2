// Chat templates of real checkpoints (tests/data/chat_templates, oracle:
// tests/oracle/chat_template_fixtures.py = transformers' apply_chat_template), where a checkpoint
// keeps its template, and the incremental rendering a KV-cached conversation uses (ChatFormat).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"
#include "trimkv/core/chat_template.h"
#include "trimkv/core/error.h"
#include "trimkv/core/jinja.h"

namespace {

using namespace trimkv;
using ojson = nlohmann::ordered_json;
using trimkv::test::ScratchDir;

std::string templates_dir() { return trimkv::test::data_dir() + "/chat_templates"; }

ojson read_ordered(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return ojson::parse(in);
}

const ojson& cases() {
  static const ojson kCases = read_ordered(templates_dir() + "/cases.json");
  return kCases;
}

std::string template_source(const std::string& file) {
  return trimkv::test::read_bytes(templates_dir() + "/" + file);
}

// The special tokens each template was rendered with (its first case's context).
std::map<std::string, std::pair<std::string, std::string>> special_tokens() {
  std::map<std::string, std::pair<std::string, std::string>> out;
  for (const ojson& c : cases()) {
    const std::string t = c["template"];
    if (out.count(t)) continue;
    const ojson& ctx = c["context"];
    out[t] = {ctx.value("bos_token", std::string()), ctx.value("eos_token", std::string())};
  }
  return out;
}

ChatTemplate load_template(const std::string& file) {
  ChatTemplate t = ChatTemplate::from_source(template_source(file), file);
  const auto tokens = special_tokens().at(file);
  t.set_special_tokens(tokens.first, tokens.second);
  return t;
}

Message text_message(const std::string& role, const std::string& text) { return {role, {ContentPart::text_part(text)}}; }

bool is_vlm_template(const std::string& file) {
  for (const char* v : {"qwen2_5_vl", "qwen3_vl", "gemma3", "smolvlm", "llava"})
    if (file.find(v) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("real chat templates render exactly as transformers' apply_chat_template", "[template][oracle]") {
  REQUIRE(cases().size() >= 100);
  std::map<std::string, jinja::Template> parsed;
  size_t rendered = 0, errors = 0;
  for (const ojson& c : cases()) {
    const std::string name = c["name"], file = c["template"];
    CAPTURE(name);
    if (!parsed.count(file)) parsed.emplace(file, jinja::Template::parse(template_source(file), file));
    const jinja::Template& t = parsed.at(file);
    if (c.contains("expected")) {
      CHECK(t.render(c["context"]) == c["expected"].get<std::string>());
      ++rendered;
    } else {
      // jinja2's message (raise_exception's text), after the template name, line and column.
      const std::string want = c["error"];
      try {
        t.render(c["context"]);
        FAIL("no error; expected: " << want);
      } catch (const Error& e) {
        const std::string msg = e.what();
        CHECK(e.kind() == ErrorKind::Input);
        CHECK(msg.find(want) != std::string::npos);
        CHECK(msg.rfind(file + ":", 0) == 0);
      }
      ++errors;
    }
  }
  CHECK(parsed.size() >= 17);
  CHECK(rendered >= 100);
  CHECK(errors >= 5);
}

TEST_CASE("ChatFormat pieces of a cached conversation add up to the template's whole rendering",
          "[template][format]") {
  // system, then three user turns with two answers between them: each piece rendered as the
  // Session asks for it (system opening, user turn through the generation prompt, answer).
  const std::vector<std::string> users = {"Hello! Grüße, 世界 👋", "  What is 2 + 2?\n", "Thanks."};
  const std::vector<std::string> answers = {"Hi there!", "4."};
  // Templates whose rendering of earlier messages changes once more follow (the fixture script
  // lists them): every piece still holds its own message, but the sum is the cache's version.
  const std::vector<std::string> unstable = {"qwen3.jinja", "deepseek_r1_distill_qwen.jinja",
                                             "mistral_7b_instruct_v0_3.jinja", "phi3_5_mini_instruct.jinja"};
  for (const auto& [file, tokens] : special_tokens()) {
    CAPTURE(file);
    if (file == "gemma2_it.jinja") continue;  // refuses a system message (tested below)
    const ContentStyle style = is_vlm_template(file) ? ContentStyle::Parts : ContentStyle::Strings;
    const ChatFormat f(load_template(file), style);
    std::vector<Message> history = {text_message("system", "Be brief.")};
    std::string pieces = f.system_text("Be brief.");
    for (size_t k = 0; k < users.size(); ++k) {
      std::vector<ContentPart> content = {ContentPart::text_part(users[k])};
      const std::string piece = f.user_text(history, content);
      CHECK((piece.find("2 + 2") != std::string::npos) == (k == 1));
      pieces += piece;
      history.push_back({"user", content});
      if (k < answers.size()) {
        const std::string answer = f.assistant_text(history, answers[k]);
        CHECK(answer.find(answers[k]) != std::string::npos);
        CHECK(answer.find(f.answer_close(history)) != std::string::npos);
        pieces += answer;
        history.push_back(text_message("assistant", answers[k]));
      }
    }
    if (std::find(unstable.begin(), unstable.end(), file) == unstable.end())
      CHECK(pieces == f.chat_template().render(history, true, style));
  }
}

TEST_CASE("ChatFormat: Qwen3's cached answers keep their thinking block; a given answer renders as transformers does",
          "[template][format]") {
  // Qwen3 renders the last answer with "<think>\n\n</think>\n\n" and drops it once a user turn
  // follows; the cache holds the answer as it was, and the next user turn follows it.
  const ChatFormat f(load_template("qwen3.jinja"), ContentStyle::Strings);
  std::vector<Message> history = {text_message("user", "Hi")};
  std::string pieces = f.user_text({}, history[0].content);
  CHECK(pieces == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(f.answer_close(history) == "<|im_end|>\n");
  const std::string answer = f.assistant_text(history, "Hello.");
  CHECK(answer == "<think>\n\n</think>\n\nHello.<|im_end|>\n");
  pieces += answer;
  history.push_back(text_message("assistant", "Hello."));
  pieces += f.user_text(history, {ContentPart::text_part("Again")});
  CHECK(pieces ==
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello.<|im_end|>\n"
        "<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n");
  // An answer with its own thinking renders it once, as transformers renders the conversation.
  const std::string thought = "<think>\nLet me see.\n</think>\n\nHello.";
  CHECK(f.assistant_text({history[0]}, thought) == "<think>\nLet me see.\n</think>\n\nHello.<|im_end|>\n");
  // An empty answer (stopped at once) and an answer that is all thinking (cut at max tokens):
  // the next user turn is still there.
  for (const std::string& a : {std::string(), std::string("<think>\nhmm\n</think>")}) {
    CAPTURE(a);
    const std::vector<Message> h = {history[0], text_message("assistant", a)};
    const std::string next = f.user_text(h, {ContentPart::text_part("Again")});
    CHECK(next == "<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n");
  }

  // enable_thinking=false puts the empty block into the generation prompt instead.
  ChatTemplate no_think = load_template("qwen3.jinja");
  no_think.set_variable(parse_template_var("enable_thinking=false"));
  const ChatFormat g(no_think, ContentStyle::Strings);
  CHECK(g.user_text({}, history[0].content) ==
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  CHECK(g.assistant_text({history[0]}, "Hello.") == "Hello.<|im_end|>\n");
}

TEST_CASE("ChatFormat: templates that rewrite history still continue with the new message", "[template][format]") {
  SECTION("Mistral v0.3 moves the system message to the newest user turn") {
    const ChatFormat f(load_template("mistral_7b_instruct_v0_3.jinja"), ContentStyle::Strings);
    std::vector<Message> history = {text_message("system", "Be brief."), text_message("user", "Hi")};
    const std::string answer = f.assistant_text(history, "Hello.");
    CHECK(answer.find("Hello.") != std::string::npos);
    history.push_back(text_message("assistant", "Hello."));
    const std::string next = f.user_text(history, {ContentPart::text_part("Again")});
    CHECK(next.find("Be brief.") != std::string::npos);
    CHECK(next.find("Again") != std::string::npos);
    CHECK(next.find("Hello.") == std::string::npos);
  }
  SECTION("Phi-3.5 ends a finished conversation with <|endoftext|>: the cache does not keep it") {
    const ChatFormat f(load_template("phi3_5_mini_instruct.jinja"), ContentStyle::Strings);
    std::vector<Message> history = {text_message("user", "Hi")};
    std::string pieces = f.user_text({}, history[0].content);
    CHECK(f.answer_close(history) == "<|end|>\n");
    pieces += f.assistant_text(history, "Hello.");
    history.push_back(text_message("assistant", "Hello."));
    const std::string next = f.user_text(history, {ContentPart::text_part("What is 2+2?")});
    CHECK(next.find("What is 2+2?") != std::string::npos);
    pieces += next;
    CHECK(pieces.find("<|endoftext|>") == std::string::npos);
    history.push_back(text_message("user", "What is 2+2?"));
    CHECK(pieces == f.chat_template().render(history, true, ContentStyle::Strings));
  }
  SECTION("DeepSeek-R1's generation prompt opens the thinking; answers close with its end token") {
    const ChatFormat f(load_template("deepseek_r1_distill_qwen.jinja"), ContentStyle::Strings);
    const std::vector<Message> history = {text_message("user", "Hi")};
    CHECK(f.user_text({}, history[0].content).find("<think>\n") != std::string::npos);
    const std::string close = f.answer_close(history);
    CHECK(close.find("end") != std::string::npos);
    const std::string answer = f.assistant_text(history, "Fine.\n</think>\n\nHello.");
    CHECK(answer.find("Hello.") != std::string::npos);
    CHECK(answer.size() >= close.size());
    CHECK(answer.compare(answer.size() - close.size(), close.size(), close) == 0);
    const std::vector<Message> h2 = {history[0], text_message("assistant", "Fine.\n</think>\n\nHello.")};
    CHECK(f.user_text(h2, {ContentPart::text_part("Again")}).find("Again") != std::string::npos);
  }
  SECTION("Llama 3.1 trims a given answer as transformers does") {
    const ChatFormat f(load_template("llama3_1_instruct.jinja"), ContentStyle::Strings);
    const std::vector<Message> history = {text_message("user", "Hi")};
    CHECK(f.assistant_text(history, "\nHello.\n\n") == "Hello.<|eot_id|>");
  }
}

TEST_CASE("ChatFormat: images reach VLM templates as parts; text templates refuse them", "[template][format]") {
  const std::vector<ContentPart> content = {ContentPart::image_part("a.png"), ContentPart::text_part("What is it?")};
  const ChatFormat smol(load_template("smolvlm_instruct.jinja"), ContentStyle::Parts);
  CHECK(smol.user_text({}, content) == "<|im_start|>User:<image>What is it?<end_of_utterance>\nAssistant:");
  const ChatFormat qwen(load_template("qwen2_5_vl_instruct.jinja"), ContentStyle::Parts);
  CHECK(qwen.user_text({}, content).find("<|vision_start|><|image_pad|><|vision_end|>What is it?") !=
        std::string::npos);
  const ChatFormat text(load_template("qwen2_5_instruct.jinja"), ContentStyle::Strings);
  CHECK_THROWS_WITH(text.user_text({}, content), Catch::Contains("cannot hold an image"));
}

TEST_CASE("ChatTemplate::from_folder finds the template where checkpoints keep it", "[template]") {
  ScratchDir dir("template-folder");
  const std::string t = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}";
  CHECK_FALSE(ChatTemplate::from_folder(dir.path()).has_value());

  SECTION("tokenizer_config.json, as a string") {
    trimkv::test::write_text(dir.file("tokenizer_config.json"), ojson{{"chat_template", t}}.dump());
    const auto c = ChatTemplate::from_folder(dir.path());
    REQUIRE(c);
    CHECK(c->render({text_message("user", "x")}, false, ContentStyle::Strings) == "[user]x");
    CHECK(c->origin().find("tokenizer_config.json") != std::string::npos);
  }
  SECTION("tokenizer_config.json, as a list of named templates: the default one") {
    const ojson list = ojson::array({{{"name", "tool_use"}, {"template", "TOOLS"}}, {{"name", "default"}, {"template", t}}});
    trimkv::test::write_text(dir.file("tokenizer_config.json"), ojson{{"chat_template", list}}.dump());
    const auto c = ChatTemplate::from_folder(dir.path());
    REQUIRE(c);
    CHECK(c->render({text_message("user", "x")}, false, ContentStyle::Strings) == "[user]x");
  }
  SECTION("a list without a default template is refused, naming what it has") {
    const ojson list = ojson::array({{{"name", "tool_use"}, {"template", "TOOLS"}}});
    trimkv::test::write_text(dir.file("tokenizer_config.json"), ojson{{"chat_template", list}}.dump());
    CHECK_THROWS_WITH(ChatTemplate::from_folder(dir.path()), Catch::Contains("tool_use") && Catch::Contains("default"));
  }
  SECTION("chat_template.jinja wins over the others; chat_template.json next") {
    trimkv::test::write_text(dir.file("tokenizer_config.json"), ojson{{"chat_template", "TOKENIZER"}}.dump());
    trimkv::test::write_text(dir.file("chat_template.json"), ojson{{"chat_template", "JSON"}}.dump());
    CHECK(ChatTemplate::from_folder(dir.path())->render({}, false, ContentStyle::Strings) == "JSON");
    trimkv::test::write_text(dir.file("chat_template.jinja"), "JINJA");
    CHECK(ChatTemplate::from_folder(dir.path())->render({}, false, ContentStyle::Strings) == "JINJA");
  }
  SECTION("processor_config.json (VLM processors)") {
    trimkv::test::write_text(dir.file("processor_config.json"), ojson{{"chat_template", t}}.dump());
    REQUIRE(ChatTemplate::from_folder(dir.path()));
  }
  SECTION("a template with a syntax error names the file, line and column") {
    trimkv::test::write_text(dir.file("chat_template.jinja"), "line one\n{% if x %}\nno end");
    CHECK_THROWS_WITH(ChatTemplate::from_folder(dir.path()), Catch::Contains(dir.file("chat_template.jinja") + ":"));
  }
  SECTION("malformed JSON names the file") {
    trimkv::test::write_text(dir.file("tokenizer_config.json"), "{\"chat_template\": ");
    CHECK_THROWS_WITH(ChatTemplate::from_folder(dir.path()), Catch::Contains("tokenizer_config.json"));
  }
}

TEST_CASE("template variables: JSON values where they parse, strings otherwise", "[template]") {
  ChatTemplate t = ChatTemplate::from_source(
      "{{ flag is sameas false }}|{{ n + 1 }}|{{ s }}|{{ q }}|{{ bos_token }}", "vars");
  t.set_special_tokens("<s>", "</s>");
  t.set_variable(parse_template_var("flag=false"));
  t.set_variable(parse_template_var("n=41"));
  t.set_variable(parse_template_var("s=hello world"));
  t.set_variable(parse_template_var("q=\"7\""));
  CHECK(t.render({}, false, ContentStyle::Strings) == "True|42|hello world|7|<s>");
  // Spaces around '=' and Python's spellings.
  const TemplateVar spaced = parse_template_var(" enable_thinking = False ");
  CHECK(spaced.name == "enable_thinking");
  CHECK(spaced.value == "false");
  CHECK(parse_template_var("x=None").value == "null");
  CHECK(parse_template_var("x=True").value == "true");
  CHECK_THROWS_WITH(parse_template_var("no-equals"), Catch::Contains("NAME=VALUE"));
  CHECK_THROWS_WITH(parse_template_var("=1"), Catch::Contains("NAME=VALUE"));
  CHECK_THROWS_WITH(parse_template_var("two words=1"), Catch::Contains("identifier"));
  CHECK_THROWS_WITH(t.set_variable(parse_template_var("messages=[]")), Catch::Contains("set by the conversation"));
}

TEST_CASE("a template that raises or fails names the template, line and column", "[template]") {
  const ChatTemplate roles = load_template("gemma3_it.jinja");
  // Two user turns in a row: Gemma's "roles must alternate".
  CHECK_THROWS_WITH(roles.render({text_message("user", "a"), text_message("user", "b")}, true, ContentStyle::Parts),
                    Catch::StartsWith("gemma3_it.jinja:") && Catch::Contains("must alternate"));
  const ChatTemplate undefined = ChatTemplate::from_source("ok\n  {{ settings.mode }}", "u.jinja");
  CHECK_THROWS_WITH(undefined.render({}, false, ContentStyle::Strings),
                    Catch::StartsWith("u.jinja:2:") && Catch::Contains("settings"));
  CHECK_THROWS_WITH(ChatTemplate::from_source("{% include 'x' %}", "inc.jinja"),
                    Catch::StartsWith("inc.jinja:1:") && Catch::Contains("include"));
}
