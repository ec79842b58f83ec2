// The synthetic visual world: determinism, answers re-derived from the scene annotations by a
// brute-force checker written independently of the generator, geometry, files, bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
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

// The question as the generator's canonical form would type it: capital first letter, the
// trailing "?" / "." variants ("", " ?", "??", "..") reduced to none.
std::string untyped(std::string q) {
  while (!q.empty() && (q.back() == '?' || q.back() == '.' || q.back() == ' ')) q.pop_back();
  REQUIRE(!q.empty());
  q[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(q[0])));
  return q;
}

// The first of `patterns` (each a whole-question regex) that matches q, with its groups.
bool match_any(const std::string& q, std::smatch& m, std::initializer_list<const char*> patterns) {
  for (const char* p : patterns)
    if (std::regex_match(q, m, std::regex(p))) return true;
  return false;
}

// The answer of a single-image question (no "In image k, " prefix; untyped) and its type. Every
// wording the world uses is listed here, written from the issue's templates and paraphrases.
std::pair<std::string, std::string> answer_single(const std::string& q, const json& scene) {
  const auto objs = objects_of(scene);
  const int size = scene.at("size");
  const double mid = (size - 1) / 2.0;
  const double margin = std::max(2.0, 0.04 * size);
  std::smatch m;
  if (match_any(q, m, {R"(What colou?r is the (\w+))", R"(Which color is the (\w+))", R"(What is the color of the (\w+))",
                       R"(Tell me the color of the (\w+))"})) {
    REQUIRE(kShapes.count(m[1]));
    return {the_one(objs, m[1], "").color, "color_of_shape"};
  }
  if (match_any(q, m, {R"(What shape is the (\w+) (object|one))", R"(Which shape is (\w+))",
                       R"(What is the shape of the (\w+) object)", R"(Name the shape of the (\w+) object)"})) {
    REQUIRE(kColors.count(m[1]));
    return {the_one(objs, "", m[1]).shape, "shape_of_color"};
  }
  if (match_any(q, m, {R"(How many (\w+) (objects|shapes) are there)", R"(How many (\w+) things do you see)",
                       R"(Count the (\w+) objects)", R"(What is the number of (\w+) objects)"})) {
    REQUIRE(kColors.count(m[1]));
    return {std::to_string(count_if(objs, "", m[1])), "count_color"};
  }
  if (match_any(q, m, {R"(How many (\w+) (are there|do you see|are shown))", R"(Count the (\w+))",
                       R"(What is the number of (\w+))"})) {
    const std::string shape = singular(m[1]);
    REQUIRE(kShapes.count(shape));
    return {std::to_string(count_if(objs, shape, "")), "count_shape"};
  }
  if (match_any(q, m, {R"(Is there a (\w+) (\w+))", R"(Do you see a (\w+) (\w+))", R"(Is a (\w+) (\w+) present)",
                       R"(Can you find a (\w+) (\w+))", R"(Is there any (\w+) (\w+))"})) {
    REQUIRE(kColors.count(m[1]));
    REQUIRE(kShapes.count(m[2]));
    return {count_if(objs, m[2], m[1]) > 0 ? "yes" : "no", "exists"};
  }
  if (match_any(q, m, {R"(Where is the (\w+) (\w+))", R"(Where's the (\w+) (\w+))", R"(In which corner is the (\w+) (\w+))",
                       R"(Which quadrant is the (\w+) (\w+) in)", R"(Where is the (\w+) (\w+) located)"})) {
    const Obj& o = the_one(objs, m[2], m[1]);
    REQUIRE(std::abs(o.cx - mid) >= margin);  // not ambiguous: clear of the midlines
    REQUIRE(std::abs(o.cy - mid) >= margin);
    return {std::string(o.cy < mid ? "top" : "bottom") + (o.cx < mid ? " left" : " right"), "position"};
  }
  if (match_any(q, m, {R"(Is the (\w+) (\w+) (?:left of|to the left of|on the left of|further left than) the (\w+) (\w+))"})) {
    const Obj& a = the_one(objs, m[2], m[1]);
    const Obj& b = the_one(objs, m[4], m[3]);
    REQUIRE(&a != &b);
    REQUIRE(std::abs(a.cx - b.cx) >= margin);
    return {a.cx < b.cx ? "yes" : "no", "left_of"};
  }
  FAIL("no template matches '" << q << "'");
  return {};
}

// The answer of any question of a turn (as typed), given the scenes shown so far.
std::pair<std::string, std::string> answer(const std::string& typed, const json& scenes, size_t n_shown) {
  const std::string q = untyped(typed);
  std::smatch m;
  if (std::regex_match(q, m, std::regex(R"((?:In|Looking at|For) image (\d+),? (.)(.*))"))) {
    const size_t k = std::stoul(m[1]);
    REQUIRE(k >= 1);
    REQUIRE(k <= n_shown);  // only images already shown
    std::string rest = m[2].str() + m[3].str();
    rest[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(rest[0])));
    auto [a, type] = answer_single(rest, scenes[k - 1]);
    return {a, "in_image_" + type};
  }
  if (match_any(q, m, {R"(Which (?:image|picture) has (?:more|the most) (\w+))", R"(Which image contains more (\w+))"})) {
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
  if (match_any(q, m, {R"(How many (\w+) are there in (?:all images|total))", R"(How many (\w+) are in all the images)",
                       R"(Count the (\w+) in all images)", R"(How many (\w+) do all the images have together)"})) {
    const std::string shape = singular(m[1]);
    int total = 0;
    for (size_t k = 0; k < n_shown; ++k) total += count_if(objects_of(scenes[k]), shape, "");
    return {std::to_string(total), "total_shape"};
  }
  return answer_single(q, scenes[n_shown - 1]);  // a plain question: about this turn's image (or the only one)
}

// The HSV of an RGB8 colour (hue in degrees).
std::array<double, 3> hsv_of(double r, double g, double b) {
  r /= 255, g /= 255, b /= 255;
  const double mx = std::max({r, g, b}), mn = std::min({r, g, b}), d = mx - mn;
  double h = 0;
  if (d > 0) {
    if (mx == r) h = 60 * std::fmod((g - b) / d + 6, 6.0);
    else if (mx == g) h = 60 * ((b - r) / d + 2);
    else h = 60 * ((r - g) / d + 4);
  }
  return {h, mx > 0 ? d / mx : 0.0, mx};
}

// The colour name whose hue box (world.h's documented ranges, written out again here) holds h.
std::string hue_name(double h) {
  if (h >= 349 || h <= 11) return "red";
  if (h >= 21 && h <= 39) return "orange";
  if (h >= 47 && h <= 61) return "yellow";
  if (h >= 94 && h <= 151) return "green";
  if (h >= 204 && h <= 246) return "blue";
  if (h >= 264 && h <= 301) return "purple";
  return "none";
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
  int n_turns = 0, n_placeholders = 0, n_labelled = 0, n_canonical_surface = 0, n_plain_follow_ups = 0;
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
      // Placeholders come first, bare or labelled by the user ("Image k:<image>", k counting
      // over the conversation), then the question (which holds none).
      size_t at = 0;
      for (size_t k = 0; k < n_new; ++k) {
        const std::string label = "Image " + std::to_string(n_shown + k + 1) + ":";
        if (text.compare(at, label.size(), label) == 0) at += label.size(), ++n_labelled;
        REQUIRE(text.compare(at, 7, "<image>") == 0);
        at += 7;
        ++n_placeholders;
      }
      n_shown += n_new;
      REQUIRE(n_shown >= 1);
      const std::string question = text.substr(at);
      if (question == untyped(question) + "?" && std::isupper(static_cast<unsigned char>(question[0]))) ++n_canonical_surface;
      // A plain (not "In image k", not multi-image) question is asked only of the one image it can
      // mean: the turn's single new image, or in a later turn the conversation's only image.
      const auto [expected, type] = answer(question, scenes, n_shown);
      if (type.rfind("in_image_", 0) != 0 && type != "more_shape" && type != "total_shape") {
        REQUIRE((n_new == 1 || n_shown == 1));
        if (n_new == 0) ++n_plain_follow_ups;
      }
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
  CHECK(n_plain_follow_ups > 10);  // "Where is the red star?" after a first question about one image
  // Most placeholders are bare (the chat template numbers the images), some labelled; most
  // questions are typed as written, some not.
  CHECK(n_labelled > n_placeholders / 10);
  CHECK(n_labelled < n_placeholders / 3);
  CHECK(n_canonical_surface > n_turns * 2 / 5);
  CHECK(n_canonical_surface < n_turns * 9 / 10);
  for (const auto& t : w::question_types()) {
    INFO(t);
    CHECK(by_type[t] > 0);  // every template occurs
  }
}

TEST_CASE("world: every question the world asks is recognised as its own type", "[world][grammar]") {
  // Every turn of test conversations (typed: prefixes, case, punctuation, labels) and of training
  // conversations with their extra turns and captions.
  std::map<std::string, int> by_type;
  w::TrainingExtras extras;  // the demo recipe's
  extras.max_extra_turns = 6;
  extras.describe_probability = 0.25;
  for (int64_t i = 0; i < 300; ++i)
    for (const w::Conversation& c : {w::make_conversation(5, w::Split::Test, i, {}),
                                     w::make_training_conversation(5, i, {}, extras)})
      for (const w::Turn& t : c.turns) {
        INFO(c.id << ": " << t.text);
        const std::optional<w::ParsedQuestion> q = w::parse_question(t.text);
        REQUIRE(q.has_value());
        CHECK(q->type == t.type);
        if (t.type.rfind("in_image_", 0) == 0 || t.type == "describe") {
          REQUIRE(t.about.size() == 1);
          CHECK(q->image == t.about.front() + 1);
        } else {
          CHECK(q->image == 0);
        }
        ++by_type[t.type];
      }
  for (const auto& t : w::question_types()) CHECK(by_type[t] > 0);
  CHECK(by_type["describe"] > 0);
}

TEST_CASE("world: questions written by the independent generator are recognised", "[world][grammar]") {
  // tests/independent/make_shapes_pillow.py shares no code with the world: its wording is the
  // issue-6 grammar as a separate program writes it.
  std::ifstream in(TRIMKV_TEST_DATA_DIR "/independent-shapes/test.jsonl");
  REQUIRE(in.good());
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json conversation = json::parse(line);
    for (const auto& t : conversation.at("turns")) {
      const std::string text = t.at("text");
      INFO(text);
      const std::optional<w::ParsedQuestion> q = w::parse_question(text);
      REQUIRE(q.has_value());
      CHECK(q->type == t.at("type").get<std::string>());
      ++n;
    }
  }
  CHECK(n > 300);
}

TEST_CASE("world: what lies outside the grammar is not recognised", "[world][grammar]") {
  for (const char* text : {"How many objects are there?", "Tell me a story about a dog.", "What color is the hexagon?",
                           "What color is the sky?", "What is in the picture?", "Is there a pink circle?",
                           "How many circles are there? And squares?", "In image 0, what color is the circle?",
                           "Describe the image.", "Which image is the best?", "circle", ""}) {
    INFO(text);
    CHECK_FALSE(w::parse_question(text).has_value());
  }
  // ... and what a user types around a question of it is ignored only where it is whitespace,
  // letter case or the final punctuation.
  CHECK(w::parse_question("  what COLOR is the star  ??")->type == "color_of_shape");
  CHECK(w::parse_question("<image> How many red objects are there")->type == "count_color");
  const auto in_image = w::parse_question("Looking at image 3 is there a green triangle?");
  REQUIRE(in_image.has_value());
  CHECK(in_image->type == "in_image_exists");
  CHECK(in_image->image == 3);
  CHECK_FALSE(w::parse_question("In image 2, which image has more stars?").has_value());
}

TEST_CASE("world: conversations and scenes cover the declared ranges", "[world]") {
  std::set<size_t> n_images, n_turns, n_objects;
  std::set<std::string> shapes, colors, sizes, backgrounds, renderers;
  std::set<bool> antialias;
  std::set<double> rotations;
  int min_side = 1 << 30, max_side = 0, n_outlined = 0, n_wide = 0, n_small_sides = 0, n_scenes = 0;
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
      renderers.insert(s.at("renderer"));
      antialias.insert(s.at("antialias").get<bool>());
      const int side = s.at("size");
      min_side = std::min(min_side, side);
      max_side = std::max(max_side, side);
      if (side <= 96) ++n_small_sides;
      ++n_scenes;
      for (const auto& o : s.at("objects")) {
        shapes.insert(o.at("shape"));
        colors.insert(o.at("color"));
        sizes.insert(o.at("size"));
        rotations.insert(o.at("rotation").get<double>());
        // Outlines only on objects at least kMinOutlinedWidth wide.
        w::Shape shape = w::Shape::Circle;
        for (int k = 0; k < w::kNumShapes; ++k)
          if (o.at("shape") == w::shape_name(static_cast<w::Shape>(k))) shape = static_cast<w::Shape>(k);
        const bool wide = w::shape_width(shape, o.at("radius").get<double>()) >= w::kMinOutlinedWidth;
        if (!wide) CHECK_FALSE(o.contains("outline"));
        n_wide += wide;
        n_outlined += o.contains("outline");
        if (o.at("shape") == "circle") CHECK(o.at("rotation").get<double>() == 0);
      }
    }
  }
  CHECK(n_images == std::set<size_t>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(n_turns == std::set<size_t>{1, 2, 3, 4, 5, 6});
  CHECK(n_objects == std::set<size_t>{1, 2, 3, 4, 5, 6});
  CHECK(shapes == kShapes);
  CHECK(colors == kColors);
  CHECK(sizes == std::set<std::string>{"small", "large"});
  CHECK(backgrounds == std::set<std::string>{"plain", "noise", "gradient", "texture"});
  CHECK(renderers == std::set<std::string>{"opencv", "supersample"});
  CHECK(antialias == std::set<bool>{false, true});
  CHECK(*rotations.begin() == -20.0);
  CHECK(*rotations.rbegin() == 20.0);
  CHECK(rotations.size() == 17);
  CHECK(n_outlined > n_wide / 8);  // about one in four of those wide enough
  CHECK(n_outlined < n_wide * 3 / 8);
  // Sides about log-uniform over 48..400: the ends are reached, a third or so at most 96 px.
  CHECK(min_side < 52);
  CHECK(max_side > 380);
  CHECK(max_side <= 400);
  CHECK(n_small_sides > n_scenes / 4);
  CHECK(n_small_sides < n_scenes / 2);
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
  // Denser scenes (the vision stage's --vision-min-objects): every count from min to max, none below.
  w::WorldOptions dense;
  dense.min_objects = 3;
  std::set<size_t> dense_counts;
  for (int64_t i = 0; i < 60; ++i) {
    const json c = conversation(5, w::Split::Test, i, dense);
    for (const auto& s : c.at("scenes")) dense_counts.insert(s.at("objects").size());
  }
  CHECK(dense_counts == std::set<size_t>{3, 4, 5, 6});
}

TEST_CASE("world: objects do not overlap and stay inside the image", "[world]") {
  for (const int size : {48, 96, 160, 400}) {
    w::WorldOptions options;
    options.min_image_size = options.max_image_size = size;
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
          // Widths (unrotated) of 8-18% of the side when small, 22-40% when large, the radius
          // at least 4 px; to the quarter pixel the radius is drawn on.
          const double width_per_radius = objs[a]["shape"] == "circle"     ? 2.0
                                          : objs[a]["shape"] == "square"   ? std::sqrt(2.0)
                                          : objs[a]["shape"] == "triangle" ? std::sqrt(3.0)
                                                                           : 2 * std::sin(72 * M_PI / 180);
          const bool small = objs[a]["size"] == "small";
          const double lo = std::max(4.0 * width_per_radius, (small ? 0.08 : 0.22) * size);
          const double hi = std::max(4.0 * width_per_radius, (small ? 0.18 : 0.40) * size);
          INFO(objs[a].dump());
          CHECK(ar * width_per_radius >= lo - 0.25 * width_per_radius - 1e-9);
          CHECK(ar * width_per_radius <= hi + 0.25 * width_per_radius + 1e-9);
          CHECK(ar >= 4.0);
          for (size_t b = a + 1; b < objs.size(); ++b) {
            const double bx = objs[b]["center"][0], by = objs[b]["center"][1], br = objs[b]["radius"];
            CHECK(std::hypot(ax - bx, ay - by) >= ar + br + gap - 1e-9);
          }
        }
      }
    }
  }
}

TEST_CASE("world: every fill keeps its colour's name; the pixel at each centre has it; backgrounds are grey",
          "[world]") {
  // The fills, from the annotation: hue, saturation and value inside the documented box, read
  // back with this test's own HSV conversion and hue table.
  std::map<std::string, int> per_color;
  for (int64_t i = 0; i < 300; ++i) {
    const json c = conversation(17, w::Split::Train, i);
    for (const auto& s : c.at("scenes"))
      for (const auto& o : s.at("objects")) {
        const auto hsv = hsv_of(o["rgb"][0], o["rgb"][1], o["rgb"][2]);
        INFO(o.dump());
        CHECK(hue_name(hsv[0]) == o.at("color").get<std::string>());
        CHECK(hsv[1] >= 0.45);
        CHECK(hsv[2] >= 0.4);
        ++per_color[o.at("color")];
      }
  }
  CHECK(per_color.size() == 6);

  ScratchDir dir("world-px");
  w::write_world(dir.path(), w::Split::Train, 3, 40, {});
  std::ifstream in(dir.file("train.jsonl"));
  std::string line;
  int n_checked = 0, n_backgrounds = 0;
  std::set<std::string> renderers_checked;
  while (std::getline(in, line)) {
    const json c = json::parse(line);
    for (size_t k = 0; k < c.at("images").size(); ++k) {
      const auto img = trimkv::vision::decode_image_file(dir.file(c["images"][k]));
      const json& s = c["scenes"][k];
      REQUIRE(img.width == s.at("size").get<int>());
      REQUIRE(img.height == img.width);
      for (const auto& o : s.at("objects")) {
        // Well inside the shape (clear of edges and outlines), both rasterisers give the fill.
        if (o["radius"].get<double>() < 8) continue;
        const int x = static_cast<int>(std::lround(o["center"][0].get<double>()));
        const int y = static_cast<int>(std::lround(o["center"][1].get<double>()));
        INFO(c["images"][k] << " " << o.dump());
        CHECK(img.at(x, y, 0) == o["rgb"][0].get<int>());
        CHECK(img.at(x, y, 1) == o["rgb"][1].get<int>());
        CHECK(img.at(x, y, 2) == o["rgb"][2].get<int>());
        renderers_checked.insert(s.at("renderer"));
        ++n_checked;
      }
      // A corner clear of every object is background: nearly grey (a spread of channels of at
      // most about an eighth of its level), never an object's saturated colour.
      bool clear = true;
      for (const auto& o : s.at("objects"))
        if (o["bbox"][0].get<int>() <= 1 && o["bbox"][1].get<int>() <= 1) clear = false;
      if (!clear) continue;
      const int r = img.at(0, 0, 0), g = img.at(0, 0, 1), b = img.at(0, 0, 2);
      CHECK(std::max({r, g, b}) - std::min({r, g, b}) <= 4 + std::max({r, g, b}) / 7);
      ++n_backgrounds;
    }
  }
  CHECK(n_checked > 50);
  CHECK(n_backgrounds > 50);
  CHECK(renderers_checked.size() == 2);
}

TEST_CASE("world: the two rasterisers draw the same shapes", "[world]") {
  // The same scene by OpenCV and by our coverage fill, anti-aliased: they differ only along the
  // edges (each pixel's coverage estimate), never in what is inside or outside.
  for (int64_t i = 0; i < 30; ++i) {
    w::Scene scene = w::make_conversation(21, w::Split::Test, i, {}).scenes[0];
    scene.antialias = true;
    for (auto& o : scene.objects) o.outline = 0;
    scene.renderer = w::Renderer::OpenCv;
    const auto a = w::render_scene(scene);
    scene.renderer = w::Renderer::Supersample;
    const auto b = w::render_scene(scene);
    const int n = scene.image_size;
    int64_t far_differ = 0, differ = 0;
    for (int y = 0; y < n; ++y)
      for (int x = 0; x < n; ++x) {
        int d = 0;
        for (int c = 0; c < 3; ++c) d = std::max(d, std::abs(int{a[(y * n + x) * 3 + c]} - int{b[(y * n + x) * 3 + c]}));
        if (d == 0) continue;
        ++differ;
        // A pixel two pixels or more away from every object's edge (9x9 points over +-2 px all
        // inside, or all outside) must agree: OpenCV's anti-aliased edges bleed up to about a
        // pixel past a sharp tip.
        bool edge = false;
        for (const auto& o : scene.objects) {
          int inside = 0;
          for (int dy = -4; dy <= 4; ++dy)
            for (int dx = -4; dx <= 4; ++dx) inside += w::object_covers(o, x + 0.5 * dx, y + 0.5 * dy);
          if (inside != 0 && inside != 81) edge = true;
        }
        if (!edge && d > 2) {
          ++far_differ;
          if (far_differ < 4) UNSCOPED_INFO("x " << x << " y " << y << " d " << d);
        }
      }
    INFO("scene " << i << ": " << differ << " pixels differ");
    CHECK(far_differ == 0);
  }
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

TEST_CASE("world: chat text follows the demo model's template, which numbers the images", "[world]") {
  CHECK(w::chat_text({{"<image>What color is the star?", "red"}, {"How many stars are there?", "1"}}) ==
        "<|im_start|>User: Image 1:<image>What color is the star?<end_of_utterance>\nAssistant: red<end_of_utterance>\n"
        "User: How many stars are there?<end_of_utterance>\nAssistant: 1<end_of_utterance>\n");
  // Numbers count over the whole conversation; a label the user typed stays as typed.
  CHECK(w::chat_text({{"<image><image>Which image has more stars?", "image 2"},
                      {"Image 3:<image>In image 3, is there a red star?", "no"}}) ==
        "<|im_start|>User: Image 1:<image>Image 2:<image>Which image has more stars?<end_of_utterance>\n"
        "Assistant: image 2<end_of_utterance>\nUser: Image 3:Image 3:<image>In image 3, is there a red star?"
        "<end_of_utterance>\nAssistant: no<end_of_utterance>\n");
  ScratchDir dir("world-chat");
  trimkv::test::write_text(dir.file("mixed.jsonl"),
                           "{\"turns\": [{\"text\": \"<image>Hi?\", \"answer\": \"yes\"}]}\n\n{\"text\": \"plain\"}\n");
  CHECK(w::chat_texts_from_jsonl(dir.file("mixed.jsonl")) ==
        std::vector<std::string>{"<|im_start|>User: Image 1:<image>Hi?<end_of_utterance>\nAssistant: yes<end_of_utterance>\n", "plain"});
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
  tiny.min_image_size = 20;
  CHECK_THAT(message_of([&] { w::validate(tiny); }), Catch::Contains("min_image_size 20"));
  w::WorldOptions inverted;
  inverted.min_image_size = 200;
  inverted.max_image_size = 100;
  CHECK_THAT(message_of([&] { w::validate(inverted); }), Catch::Contains("max_image_size 100"));
  w::WorldOptions many;
  many.max_images = 9;
  CHECK_THAT(message_of([&] { w::validate(many); }), Catch::Contains("max_images 9"));
  w::WorldOptions crowded;
  crowded.min_objects = 4;
  crowded.max_objects = 3;
  CHECK_THAT(message_of([&] { w::validate(crowded); }), Catch::Contains("min_objects 4"));
  ScratchDir dir("world-bad");
  CHECK_THAT(message_of([&] { w::write_world(dir.path(), w::Split::Train, 1, 0, {}); }), Catch::Contains("positive"));
  trimkv::test::write_text(dir.file("a-file"), "x");
  CHECK_THAT(message_of([&] { w::write_world(dir.file("a-file") + "/out", w::Split::Train, 1, 1, {}); }),
             Catch::Contains("cannot create"));
  CHECK_THROWS_AS(w::parse_split("dev"), trimkv::Error);
}
