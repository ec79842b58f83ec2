// The synthetic visual world: determinism, answers re-derived from the scene annotations by a
// brute-force checker written independently of the generator, geometry, files, bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "test_util.h"
#include "trimkv/core/error.h"
#include "trimkv/vision/image.h"
#include "trimkv/vision/world.h"

namespace w = trimkv::vision::world;
using trimkv::test::ScratchDir;
using nlohmann::json;

namespace {

const std::set<std::string> kShapes = {"circle", "square", "triangle", "star"};
const std::set<std::string> kColors = {"red", "green", "blue", "yellow", "purple", "orange"};

json conversation(uint64_t seed, w::Split split, int64_t index, const w::WorldOptions& options = {}) {
  const w::Conversation c = w::make_conversation(seed, split, index, options);
  std::vector<std::string> paths;
  for (size_t k = 0; k < c.scenes.size(); ++k) paths.push_back("img" + std::to_string(k + 1) + ".png");
  return json::parse(w::conversation_json(c, paths));
}

std::string singular(const std::string& plural) {
  REQUIRE(plural.size() > 1);
  REQUIRE(plural.back() == 's');
  return plural.substr(0, plural.size() - 1);
}

size_t count_placeholders(const std::string& text) {
  size_t n = 0;
  for (size_t at = text.find("<image>"); at != std::string::npos; at = text.find("<image>", at + 1)) ++n;
  return n;
}

// --- the brute-force checker: answers from the "scenes" annotation only -----------------------

struct Obj {
  std::string shape, color;
  double cx, cy;
};

std::vector<Obj> objects_of(const json& scene) {
  std::vector<Obj> out;
  for (const auto& o : scene.at("objects"))
    out.push_back({o.at("shape"), o.at("color"), o.at("center")[0].get<double>(), o.at("center")[1].get<double>()});
  return out;
}

int count_if(const std::vector<Obj>& objs, const std::string& shape, const std::string& color) {
  int n = 0;
  for (const Obj& o : objs)
    if ((shape.empty() || o.shape == shape) && (color.empty() || o.color == color)) ++n;
  return n;
}

const Obj& the_one(const std::vector<Obj>& objs, const std::string& shape, const std::string& color) {
  REQUIRE(count_if(objs, shape, color) == 1);  // "the ..." must be well defined
  for (const Obj& o : objs)
    if ((shape.empty() || o.shape == shape) && (color.empty() || o.color == color)) return o;
  FAIL("unreachable");
  return objs.front();
}

// The answer of a single-image question (no "In image k, " prefix) and its type.
std::pair<std::string, std::string> answer_single(const std::string& q, const json& scene) {
  const auto objs = objects_of(scene);
  const int size = scene.at("size");
  const double mid = (size - 1) / 2.0;
  const double margin = std::max(2.0, 0.04 * size);
  std::smatch m;
  if (std::regex_match(q, m, std::regex(R"(What color is the (\w+)\?)"))) {
    REQUIRE(kShapes.count(m[1]));
    return {the_one(objs, m[1], "").color, "color_of_shape"};
  }
  if (std::regex_match(q, m, std::regex(R"(What shape is the (\w+) object\?)"))) {
    REQUIRE(kColors.count(m[1]));
    return {the_one(objs, "", m[1]).shape, "shape_of_color"};
  }
  if (std::regex_match(q, m, std::regex(R"(How many (\w+) objects are there\?)"))) {
    REQUIRE(kColors.count(m[1]));
    return {std::to_string(count_if(objs, "", m[1])), "count_color"};
  }
  if (std::regex_match(q, m, std::regex(R"(How many (\w+) are there\?)"))) {
    const std::string shape = singular(m[1]);
    REQUIRE(kShapes.count(shape));
    return {std::to_string(count_if(objs, shape, "")), "count_shape"};
  }
  if (std::regex_match(q, m, std::regex(R"(Is there a (\w+) (\w+)\?)"))) {
    REQUIRE(kColors.count(m[1]));
    REQUIRE(kShapes.count(m[2]));
    return {count_if(objs, m[2], m[1]) > 0 ? "yes" : "no", "exists"};
  }
  if (std::regex_match(q, m, std::regex(R"(Where is the (\w+) (\w+)\?)"))) {
    const Obj& o = the_one(objs, m[2], m[1]);
    REQUIRE(std::abs(o.cx - mid) >= margin);  // not ambiguous: clear of the midlines
    REQUIRE(std::abs(o.cy - mid) >= margin);
    return {std::string(o.cy < mid ? "top" : "bottom") + (o.cx < mid ? " left" : " right"), "position"};
  }
  if (std::regex_match(q, m, std::regex(R"(Is the (\w+) (\w+) left of the (\w+) (\w+)\?)"))) {
    const Obj& a = the_one(objs, m[2], m[1]);
    const Obj& b = the_one(objs, m[4], m[3]);
    REQUIRE(&a != &b);
    REQUIRE(std::abs(a.cx - b.cx) >= margin);
    return {a.cx < b.cx ? "yes" : "no", "left_of"};
  }
  FAIL("no template matches '" << q << "'");
  return {};
}

// The answer of any question of a turn, given the scenes shown so far.
std::pair<std::string, std::string> answer(const std::string& q, const json& scenes, size_t n_shown) {
  std::smatch m;
  if (std::regex_match(q, m, std::regex(R"(In image (\d+), (.)(.*))"))) {
    const size_t k = std::stoul(m[1]);
    REQUIRE(k >= 1);
    REQUIRE(k <= n_shown);  // only images already shown
    std::string rest = m[2].str() + m[3].str();
    rest[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(rest[0])));
    auto [a, type] = answer_single(rest, scenes[k - 1]);
    return {a, "in_image_" + type};
  }
  if (std::regex_match(q, m, std::regex(R"(Which image has more (\w+)\?)"))) {
    const std::string shape = singular(m[1]);
    REQUIRE(n_shown >= 2);
    int best = -1;
    std::vector<size_t> argmax;
    for (size_t k = 0; k < n_shown; ++k) {
      const int c = count_if(objects_of(scenes[k]), shape, "");
      if (c > best) best = c, argmax = {k};
      else if (c == best) argmax.push_back(k);
    }
    REQUIRE(best >= 1);
    REQUIRE(argmax.size() == 1);  // unambiguous
    return {"image " + std::to_string(argmax[0] + 1), "more_shape"};
  }
  if (std::regex_match(q, m, std::regex(R"(How many (\w+) are there in all images\?)"))) {
    const std::string shape = singular(m[1]);
    int total = 0;
    for (size_t k = 0; k < n_shown; ++k) total += count_if(objects_of(scenes[k]), shape, "");
    return {std::to_string(total), "total_shape"};
  }
  return answer_single(q, scenes[n_shown - 1]);  // a plain question: about this turn's image
}

}  // namespace

TEST_CASE("world: a conversation is a pure function of (seed, split, index, options)", "[world]") {
  CHECK(conversation(7, w::Split::Train, 3) == conversation(7, w::Split::Train, 3));
  CHECK(conversation(7, w::Split::Train, 3) != conversation(7, w::Split::Train, 4));
  CHECK(conversation(7, w::Split::Train, 3) != conversation(8, w::Split::Train, 3));
  CHECK(conversation(7, w::Split::Train, 3) != conversation(7, w::Split::Val, 3));
  const w::Scene s = w::make_conversation(7, w::Split::Train, 3, {}).scenes[0];
  CHECK(w::render_scene(s) == w::render_scene(s));
}

TEST_CASE("world: the same seed writes byte-identical files", "[world]") {
  ScratchDir a("world-a"), b("world-b");
  w::WorldOptions options;
  const auto fa = w::write_world(a.path(), w::Split::Val, 11, 12, options);
  const auto fb = w::write_world(b.path(), w::Split::Val, 11, 12, options);
  CHECK(fa.n_conversations == 12);
  CHECK(fa.n_images == fb.n_images);
  int n_files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(a.path())) {
    if (!entry.is_regular_file()) continue;
    const auto rel = std::filesystem::relative(entry.path(), a.path());
    INFO(rel.string());
    CHECK(trimkv::test::read_bytes(entry.path().string()) == trimkv::test::read_bytes(b.file(rel.string())));
    ++n_files;
  }
  CHECK(n_files == fa.n_images + 2);  // PNGs, val.jsonl, val.meta.json
}

TEST_CASE("world: every answer equals a brute-force recomputation from the scene annotation", "[world]") {
  std::map<std::string, int> by_type;
  int n_turns = 0;
  for (int64_t i = 0; i < 400; ++i) {
    const json c = conversation(2024, w::Split::Train, i);
    INFO(c.at("id").get<std::string>());
    const json& scenes = c.at("scenes");
    REQUIRE(scenes.size() == c.at("images").size());
    size_t n_shown = 0;
    for (const auto& t : c.at("turns")) {
      const std::string text = t.at("text");
      INFO(text);
      const size_t n_new = count_placeholders(text);
      // Labelled placeholders come first ("Image k:<image>", k counting over the conversation),
      // then the question (which holds none).
      std::string labels;
      for (size_t k = 0; k < n_new; ++k) labels += "Image " + std::to_string(n_shown + k + 1) + ":<image>";
      REQUIRE(text.substr(0, labels.size()) == labels);
      n_shown += n_new;
      REQUIRE(n_shown >= 1);
      const std::string question = text.substr(labels.size());
      // A plain (not "In image k", not multi-image) question is asked only of a turn's single image.
      const auto [expected, type] = answer(question, scenes, n_shown);
      if (type.rfind("in_image_", 0) != 0 && type != "more_shape" && type != "total_shape") REQUIRE(n_new == 1);
      CHECK(t.at("answer").get<std::string>() == expected);
      CHECK(t.at("type").get<std::string>() == type);
      for (const auto& k : t.at("about")) CHECK(k.get<size_t>() <= n_shown);
      CHECK(std::regex_match(expected, std::regex(R"([a-z]+|\d|(top|bottom) (left|right)|image [1-8])")));
      ++by_type[type];
      ++n_turns;
    }
    CHECK(n_shown == scenes.size());  // one placeholder per image
  }
  CHECK(n_turns > 400);
  for (const auto& t : w::question_types()) {
    INFO(t);
    CHECK(by_type[t] > 0);  // every template occurs
  }
}

TEST_CASE("world: conversations and scenes cover the declared ranges", "[world]") {
  std::set<size_t> n_images, n_turns, n_objects;
  std::set<std::string> shapes, colors, sizes, backgrounds;
  bool later_turn_about_earlier_image = false;
  for (int64_t i = 0; i < 300; ++i) {
    const json c = conversation(5, w::Split::Test, i);
    n_images.insert(c.at("images").size());
    n_turns.insert(c.at("turns").size());
    size_t shown_before = 0;
    for (const auto& t : c.at("turns")) {
      for (const auto& k : t.at("about"))
        if (k.get<size_t>() <= shown_before) later_turn_about_earlier_image = true;
      shown_before += count_placeholders(t.at("text"));
    }
    for (const auto& s : c.at("scenes")) {
      n_objects.insert(s.at("objects").size());
      backgrounds.insert(s.at("background"));
      for (const auto& o : s.at("objects")) {
        shapes.insert(o.at("shape"));
        colors.insert(o.at("color"));
        sizes.insert(o.at("size"));
      }
    }
  }
  CHECK(n_images == std::set<size_t>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(n_turns == std::set<size_t>{1, 2, 3, 4, 5, 6});
  CHECK(n_objects == std::set<size_t>{1, 2, 3, 4, 5, 6});
  CHECK(shapes == kShapes);
  CHECK(colors == kColors);
  CHECK(sizes == std::set<std::string>{"small", "large"});
  CHECK(backgrounds == std::set<std::string>{"plain", "noise", "gradient"});
  CHECK(later_turn_about_earlier_image);

  w::WorldOptions small;
  small.max_images = 2;
  small.max_turns = 1;
  small.max_objects = 1;
  for (int64_t i = 0; i < 50; ++i) {
    const json c = conversation(5, w::Split::Test, i, small);
    CHECK(c.at("images").size() <= 2);
    CHECK(c.at("turns").size() == 1);
    for (const auto& s : c.at("scenes")) CHECK(s.at("objects").size() == 1);
  }
}

TEST_CASE("world: objects do not overlap and stay inside the image", "[world]") {
  for (const int size : {64, 96, 160}) {
    w::WorldOptions options;
    options.image_size = size;
    const double gap = std::max(2.0, 0.03 * size);
    for (int64_t i = 0; i < 150; ++i) {
      const json c = conversation(99, w::Split::Train, i, options);
      for (const auto& s : c.at("scenes")) {
        REQUIRE(s.at("size").get<int>() == size);
        const auto& objs = s.at("objects");
        for (size_t a = 0; a < objs.size(); ++a) {
          const double ax = objs[a]["center"][0], ay = objs[a]["center"][1], ar = objs[a]["radius"];
          CHECK(ax - ar >= 0);
          CHECK(ay - ar >= 0);
          CHECK(ax + ar <= size - 1);
          CHECK(ay + ar <= size - 1);
          const auto& bb = objs[a]["bbox"];
          CHECK(bb[0].get<int>() <= ax);
          CHECK(bb[2].get<int>() >= ax);
          CHECK(bb[1].get<int>() <= ay);
          CHECK(bb[3].get<int>() >= ay);
          CHECK(bb[0].get<int>() >= 0);
          CHECK(bb[3].get<int>() <= size - 1);
          // Nominal sizes stay at least 14 px (a small circle's diameter; NOTES-demo-training.md).
          const double factor = objs[a]["shape"] == "circle"     ? 1.0
                                : objs[a]["shape"] == "square"   ? 1.216
                                : objs[a]["shape"] == "triangle" ? 1.35
                                                                 : 1.3;
          CHECK(2 * ar / factor >= 14.0 - 1e-9);
          for (size_t b = a + 1; b < objs.size(); ++b) {
            const double bx = objs[b]["center"][0], by = objs[b]["center"][1], br = objs[b]["radius"];
            CHECK(std::hypot(ax - bx, ay - by) >= ar + br + gap - 1e-9);
          }
        }
      }
    }
  }
}

TEST_CASE("world: the pixel at each object's centre has the object's colour", "[world]") {
  ScratchDir dir("world-px");
  w::write_world(dir.path(), w::Split::Train, 3, 25, {});
  std::ifstream in(dir.file("train.jsonl"));
  std::string line;
  int n_checked = 0;
  while (std::getline(in, line)) {
    const json c = json::parse(line);
    for (size_t k = 0; k < c.at("images").size(); ++k) {
      const auto img = trimkv::vision::decode_image_file(dir.file(c["images"][k]));
      const json& s = c["scenes"][k];
      REQUIRE(img.width == s.at("size").get<int>());
      REQUIRE(img.height == img.width);
      for (const auto& o : s.at("objects")) {
        const int x = static_cast<int>(std::lround(o["center"][0].get<double>()));
        const int y = static_cast<int>(std::lround(o["center"][1].get<double>()));
        const auto rgb = w::color_rgb([&] {
          for (int ci = 0; ci < w::kNumColors; ++ci)
            if (o["color"] == w::color_name(static_cast<w::Color>(ci))) return static_cast<w::Color>(ci);
          FAIL("unknown colour");
          return w::Color::Red;
        }());
        INFO(c["images"][k] << " " << o.dump());
        CHECK(img.at(x, y, 0) == rgb[0]);
        CHECK(img.at(x, y, 1) == rgb[1]);
        CHECK(img.at(x, y, 2) == rgb[2]);
        ++n_checked;
      }
      // Pixels far from every object are background: light grey, never an object colour.
      const int bx = 0, by = 0;
      bool clear = true;
      for (const auto& o : s.at("objects"))
        if (o["bbox"][0].get<int>() <= bx + 1 && o["bbox"][1].get<int>() <= by + 1) clear = false;
      if (clear) CHECK(std::min({img.at(bx, by, 0), img.at(bx, by, 1), img.at(bx, by, 2)}) >= 150);
    }
  }
  CHECK(n_checked > 50);
}

TEST_CASE("world: splits have disjoint seeds and disjoint images", "[world]") {
  std::set<uint64_t> seeds;
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{12345}, w::kMaxSeed})
    for (auto split : {w::Split::Train, w::Split::Val, w::Split::Test}) seeds.insert(w::split_seed(seed, split));
  CHECK(seeds.size() == 18);
  for (uint64_t a = 0; a < 64; ++a)
    for (uint64_t b = 0; b < 64; ++b)
      CHECK((w::split_seed(a, w::Split::Train) == w::split_seed(b, w::Split::Test)) == false);
  CHECK_THROWS_AS(w::split_seed(w::kMaxSeed + 1, w::Split::Train), trimkv::Error);

  // Same user seed, different splits: no image in common.
  std::set<std::vector<uint8_t>> train_pixels;
  for (int64_t i = 0; i < 40; ++i)
    for (const auto& s : w::make_conversation(1, w::Split::Train, i, {}).scenes) train_pixels.insert(w::render_scene(s));
  for (auto split : {w::Split::Val, w::Split::Test})
    for (int64_t i = 0; i < 40; ++i)
      for (const auto& s : w::make_conversation(1, split, i, {}).scenes) CHECK(train_pixels.count(w::render_scene(s)) == 0);
}

TEST_CASE("world: files, paths and ids", "[world]") {
  ScratchDir dir("world-files");
  const auto files = w::write_world(dir.path(), w::Split::Test, 4, 6, {});
  CHECK(files.jsonl == dir.file("test.jsonl"));
  const json meta = trimkv::test::read_json(files.meta);
  CHECK(meta.at("seed") == 4);
  CHECK(meta.at("split") == "test");
  CHECK(meta.at("conversations") == 6);
  std::ifstream in(files.jsonl);
  std::string line;
  std::set<std::string> ids;
  int64_t n_images = 0;
  while (std::getline(in, line)) {
    const json c = json::parse(line);
    ids.insert(c.at("id").get<std::string>());
    for (const auto& p : c.at("images")) {
      CHECK(p.get<std::string>().rfind("images/test/", 0) == 0);
      CHECK(std::filesystem::is_regular_file(dir.file(p)));
      ++n_images;
    }
  }
  CHECK(ids.size() == 6);
  CHECK(ids.count("test-000000") == 1);
  CHECK(n_images == files.n_images);
}

TEST_CASE("world: chat text follows the SmolVLM template", "[world]") {
  CHECK(w::chat_text({{"<image>What color is the star?", "red"}, {"How many stars are there?", "1"}}) ==
        "<|im_start|>User:<image>What color is the star?<end_of_utterance>\nAssistant: red<end_of_utterance>\n"
        "User: How many stars are there?<end_of_utterance>\nAssistant: 1<end_of_utterance>\n");
  ScratchDir dir("world-chat");
  trimkv::test::write_text(dir.file("mixed.jsonl"),
                           "{\"turns\": [{\"text\": \"<image>Hi?\", \"answer\": \"yes\"}]}\n\n{\"text\": \"plain\"}\n");
  CHECK(w::chat_texts_from_jsonl(dir.file("mixed.jsonl")) ==
        std::vector<std::string>{"<|im_start|>User:<image>Hi?<end_of_utterance>\nAssistant: yes<end_of_utterance>\n", "plain"});
  trimkv::test::write_text(dir.file("bad.jsonl"), "{\"text\": \"ok\"}\nnot json\n");
  try {
    w::chat_texts_from_jsonl(dir.file("bad.jsonl"));
    FAIL("no error");
  } catch (const trimkv::Error& e) {
    CHECK(e.kind() == trimkv::ErrorKind::Format);
    CHECK_THAT(e.what(), Catch::Contains("bad.jsonl:2"));
  }
  CHECK_THROWS_AS(w::chat_texts_from_jsonl(dir.file("missing.jsonl")), trimkv::Error);
}

TEST_CASE("world: bad options and unwritable folders fail with clear errors", "[world]") {
  auto message_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const trimkv::Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  w::WorldOptions tiny;
  tiny.image_size = 40;
  CHECK_THAT(message_of([&] { w::validate(tiny); }), Catch::Contains("image_size 40"));
  w::WorldOptions many;
  many.max_images = 9;
  CHECK_THAT(message_of([&] { w::validate(many); }), Catch::Contains("max_images 9"));
  ScratchDir dir("world-bad");
  CHECK_THAT(message_of([&] { w::write_world(dir.path(), w::Split::Train, 1, 0, {}); }), Catch::Contains("positive"));
  trimkv::test::write_text(dir.file("a-file"), "x");
  CHECK_THAT(message_of([&] { w::write_world(dir.file("a-file") + "/out", w::Split::Train, 1, 1, {}); }),
             Catch::Contains("cannot create"));
  CHECK_THROWS_AS(w::parse_split("dev"), trimkv::Error);
}
