// Conversations: images spread over user turns, one question per turn, later turns asking about
// earlier images; their JSONL form and their chat-template text.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "trimkv/core/error.h"
#include "trimkv/vision/idefics3.h"
#include "world/world_internal.h"

namespace trimkv::vision::world {

namespace {

// The question of a turn that shows `new_images` (0-based, possibly none) after n_before earlier
// images: a plain template about the one image it can only mean (this turn's single new image, or
// the conversation's only image in a follow-up turn, as people ask), image k of those shown so far
// ("In image k, ..."; earlier turns' images preferred), or all of them.
QuestionAnswer turn_question(Rng& rng, const std::vector<Scene>& scenes, const std::vector<int>& new_images,
                             int n_before, int n_shown) {
  enum { kPlain, kPrefixed, kMulti };
  // Either way that image is the last one shown.
  const bool plain = new_images.size() == 1 || n_shown == 1;
  std::vector<double> weights = {plain ? 2.0 : 0.0, 2.0, n_shown >= 2 ? 1.0 : 0.0};
  QuestionAnswer qa;
  for (;;) {
    const size_t kind = rng.weighted(weights);
    if (kind == kPlain) {
      qa = single_image_question(rng, scenes[n_shown - 1]);
      qa.about = {n_shown - 1};
      return qa;
    }
    if (kind == kPrefixed) {
      const int k = n_before > 0 && rng.bernoulli(0.6) ? static_cast<int>(rng.index(n_before))
                                                       : static_cast<int>(rng.index(n_shown));
      qa = single_image_question(rng, scenes[k]);
      qa.text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(qa.text[0])));
      static const std::vector<const char*> kPrefixes = {"In image ", "In image ", "In image ", "Looking at image ",
                                                         "For image "};
      const std::string number = std::to_string(k + 1);
      qa.text = rng.pick(kPrefixes) + number + (rng.bernoulli(0.8) ? ", " : " ") + qa.text;
      qa.type = "in_image_" + qa.type;
      qa.about = {k};
      return qa;
    }
    if (multi_image_question(rng, scenes, n_shown, qa)) return qa;
    weights[kMulti] = 0;
  }
}

// How a person might type the question: the first letter lowercase one time in five; the final
// "?" or "." dropped one time in six, or spaced or doubled now and then.
std::string typed(Rng& rng, std::string text) {
  if (rng.bernoulli(0.2)) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  const double u = rng.uniform01();
  if (u < 1.0 / 6) {
    text.pop_back();
  } else if (u < 0.22 && text.back() == '?') {
    text.insert(text.size() - 1, " ");
  } else if (u < 0.26) {
    text.push_back(text.back());
  }
  return text;
}

}  // namespace

std::string image_label(int k) { return "Image " + std::to_string(k + 1) + ":"; }

uint64_t split_seed(uint64_t seed, Split split) {
  TRIMKV_CHECK(seed <= kMaxSeed, Input, "seed ", seed, " is too large (at most ", kMaxSeed, ")");
  return seed * 4 + static_cast<uint64_t>(split);
}

Conversation make_conversation(uint64_t seed, Split split, int64_t index, const WorldOptions& options) {
  validate(options);
  TRIMKV_CHECK(index >= 0, Input, "conversation index ", index, " is negative");
  const uint64_t stream = split_seed(seed, split);
  Rng rng({static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32),
           static_cast<uint32_t>(static_cast<uint64_t>(index)),
           static_cast<uint32_t>(static_cast<uint64_t>(index) >> 32)});

  Conversation conv;
  char id[64];
  std::snprintf(id, sizeof id, "%s-%06lld", split_name(split), static_cast<long long>(index));
  conv.id = id;
  const int n_images = static_cast<int>(rng.uniform_int(1, options.max_images));
  const int n_turns = static_cast<int>(rng.uniform_int(1, options.max_turns));
  // The first turn shows at least one image; the others land on uniformly drawn turns.
  std::vector<int> per_turn(n_turns, 0);
  per_turn[0] = 1;
  for (int i = 1; i < n_images; ++i) ++per_turn[rng.index(n_turns)];
  for (int i = 0; i < n_images; ++i) conv.scenes.push_back(sample_scene(rng, options));

  int n_shown = 0;
  for (int t = 0; t < n_turns; ++t) {
    Turn turn;
    const int n_before = n_shown;
    for (int i = 0; i < per_turn[t]; ++i) turn.new_images.push_back(n_shown++);
    const QuestionAnswer qa = turn_question(rng, conv.scenes, turn.new_images, n_before, n_shown);
    // Bare placeholders (the chat template numbers the images), or now and then a label the
    // user typed as well.
    for (int k : turn.new_images) turn.text += (rng.bernoulli(0.2) ? image_label(k) : std::string()) + kImageToken;
    turn.text += typed(rng, qa.text);
    turn.answer = qa.answer;
    turn.type = qa.type;
    turn.about = qa.about;
    turn.subjects = qa.subjects;
    conv.turns.push_back(std::move(turn));
  }
  return conv;
}

std::string describe_scene(const Scene& scene) {
  std::vector<const Object*> order;
  for (const Object& o : scene.objects) order.push_back(&o);
  std::sort(order.begin(), order.end(), [](const Object* a, const Object* b) {
    return a->cy != b->cy ? a->cy < b->cy : a->cx < b->cx;
  });
  const double mid = (scene.image_size - 1) / 2.0;
  std::string text;
  for (const Object* o : order) {
    if (!text.empty()) text += ", ";
    text += std::string(size_name(o->size)) + " " + color_name(o->color) + " " + shape_name(o->shape) +
            (o->cy < mid ? " top" : " bottom") + (o->cx < mid ? " left" : " right");
  }
  return text;
}

Conversation make_training_conversation(uint64_t seed, int64_t index, const WorldOptions& options,
                                        const TrainingExtras& extras) {
  TRIMKV_CHECK(extras.max_extra_turns >= 0 && extras.describe_probability >= 0 && extras.describe_probability <= 1,
               Input, "training extras: max_extra_turns must be >= 0 and describe_probability in [0, 1]");
  Conversation conv = make_conversation(seed, Split::Train, index, options);
  const uint64_t stream = split_seed(seed, Split::Train);
  // A stream of its own, so the base conversation stays what make_conversation gives.
  Rng rng({static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32),
           static_cast<uint32_t>(static_cast<uint64_t>(index)),
           static_cast<uint32_t>(static_cast<uint64_t>(index) >> 32) ^ 0x5eedu});
  const int n = static_cast<int>(conv.scenes.size());
  const int n_extra = static_cast<int>(rng.uniform_int(0, extras.max_extra_turns));
  for (int e = 0; e < n_extra; ++e) {
    Turn turn;
    if (rng.bernoulli(extras.describe_probability)) {
      const int k = static_cast<int>(rng.index(n));
      turn.text = "Describe image " + std::to_string(k + 1) + ".";
      turn.answer = describe_scene(conv.scenes[k]);
      turn.type = "describe";
      turn.about = {k};
    } else {
      const QuestionAnswer qa = turn_question(rng, conv.scenes, {}, n, n);
      turn.text = typed(rng, qa.text);
      turn.answer = qa.answer;
      turn.type = qa.type;
      turn.about = qa.about;
      turn.subjects = qa.subjects;
    }
    conv.turns.push_back(std::move(turn));
  }
  return conv;
}

std::string conversation_json(const Conversation& conv, const std::vector<std::string>& image_paths) {
  TRIMKV_ASSERT(image_paths.size() == conv.scenes.size());
  using ojson = nlohmann::ordered_json;
  ojson turns = ojson::array();
  for (const Turn& t : conv.turns) {
    ojson about = ojson::array();
    for (int k : t.about) about.push_back(k + 1);
    turns.push_back({{"text", t.text}, {"answer", t.answer}, {"type", t.type}, {"about", about}});
  }
  ojson scenes = ojson::array();
  for (const Scene& s : conv.scenes) {
    ojson objects = ojson::array();
    for (const Object& o : s.objects) {
      ojson object = {{"shape", shape_name(o.shape)},
                      {"color", color_name(o.color)},
                      {"size", size_name(o.size)},
                      {"rgb", {o.rgb[0], o.rgb[1], o.rgb[2]}},
                      {"center", {o.cx, o.cy}},
                      {"radius", o.radius},
                      {"rotation", o.rotation * kRotationStep},
                      {"bbox", {o.bbox[0], o.bbox[1], o.bbox[2], o.bbox[3]}}};
      if (o.outline > 0) {
        object["outline"] = o.outline;
        object["outline_rgb"] = {o.outline_rgb[0], o.outline_rgb[1], o.outline_rgb[2]};
      }
      objects.push_back(object);
    }
    ojson scene = {{"size", s.image_size},
                   {"renderer", renderer_name(s.renderer)},
                   {"antialias", s.antialias},
                   {"background", background_name(s.background)},
                   {"bg_rgb", {s.bg_rgb[0], s.bg_rgb[1], s.bg_rgb[2]}}};
    if (s.background == Background::Gradient) {
      scene["bg_rgb2"] = {s.bg_rgb2[0], s.bg_rgb2[1], s.bg_rgb2[2]};
      scene["gradient_direction"] = s.gradient_direction * 22.5;
    }
    if (s.background == Background::Noise || s.background == Background::Texture) {
      scene["amplitude"] = s.noise_amplitude;
      scene["texture_seed"] = s.texture_seed;
    }
    scene["objects"] = objects;
    scenes.push_back(scene);
  }
  const ojson line = {{"id", conv.id}, {"images", image_paths}, {"turns", turns}, {"scenes", scenes}};
  return line.dump();
}

std::string chat_text(const std::vector<std::pair<std::string, std::string>>& turns) {
  std::vector<Message> messages;
  for (const auto& [user, answer] : turns) {
    // The images' paths do not matter to the template: it writes "<image>" for each.
    messages.push_back({"user", content_from_prompt(user, std::vector<std::string>(count_image_placeholders(user)))});
    messages.push_back({"assistant", {ContentPart::text_part(answer)}});
  }
  return demo_chat_format().chat_template().render(messages, false, ContentStyle::Parts);
}

std::vector<std::string> chat_texts_from_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TRIMKV_CHECK(in.good(), Io, path, ": cannot open file");
  std::vector<std::string> texts;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      TRIMKV_FAIL(Format, path, ":", line_no, ": not JSON: ", e.what());
    }
    TRIMKV_CHECK(j.is_object(), Format, path, ":", line_no, ": a line must be a JSON object");
    if (j.contains("turns")) {
      const auto& turns = j.at("turns");
      TRIMKV_CHECK(turns.is_array(), Format, path, ":", line_no, ": \"turns\" must be an array");
      std::vector<std::pair<std::string, std::string>> pairs;
      for (const auto& t : turns) {
        TRIMKV_CHECK(t.is_object() && t.contains("text") && t.at("text").is_string() &&
                         t.contains("answer") && t.at("answer").is_string(),
                     Format, path, ":", line_no, ": every turn needs \"text\" and \"answer\" strings");
        pairs.emplace_back(t.at("text").get<std::string>(), t.at("answer").get<std::string>());
      }
      texts.push_back(chat_text(pairs));
    } else if (j.contains("text") && j.at("text").is_string()) {
      texts.push_back(j.at("text").get<std::string>());
    } else {
      TRIMKV_FAIL(Format, path, ":", line_no, ": a line needs \"turns\" (a world conversation) or a \"text\" string");
    }
  }
  TRIMKV_CHECK(!in.bad(), Io, path, ": read error");
  return texts;
}

}  // namespace trimkv::vision::world
