// Question templates, each with a few paraphrases. Each is asked only when its answer is well
// defined for the scene(s):
// "the {shape}" needs that shape to be unique, "the {color} {shape}" that combination,
// positions keep a margin from the midlines, "which image has more" needs a unique maximum, and
// totals over all images stay single digits.
#include <algorithm>
#include <array>
#include <string>

#include "trimkv/core/error.h"
#include "world/world_internal.h"

namespace trimkv::vision::world {
namespace {

struct Counts {
  std::array<int, kNumShapes> shape{};
  std::array<int, kNumColors> color{};
  std::array<std::array<int, kNumShapes>, kNumColors> combo{};  // [color][shape]

  explicit Counts(const Scene& scene) {
    for (const Object& o : scene.objects) {
      ++shape[static_cast<int>(o.shape)];
      ++color[static_cast<int>(o.color)];
      ++combo[static_cast<int>(o.color)][static_cast<int>(o.shape)];
    }
  }
  bool unique_combo(const Object& o) const {
    return combo[static_cast<int>(o.color)][static_cast<int>(o.shape)] == 1;
  }
};

std::string the(const Object& o) { return std::string(color_name(o.color)) + " " + shape_name(o.shape); }

// A question's wording: the first template (the issue-6 grammar) 60% of the time, otherwise
// one of its paraphrases, with "{key}" replaced by the values.
std::string phrase(Rng& rng, const std::vector<const char*>& templates,
                   const std::vector<std::pair<const char*, std::string>>& values) {
  std::string text = templates.size() > 1 && rng.bernoulli(0.4)
                         ? templates[1 + rng.index(templates.size() - 1)]
                         : templates.front();
  for (const auto& [key, value] : values)
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
      text.replace(at, std::string(key).size(), value);
  return text;
}
Subject subject(const Object& o) { return {static_cast<int>(o.color), static_cast<int>(o.shape)}; }

// A shape (or colour) index: with probability 3/4 one present in the scene, else any.
template <size_t N>
int count_subject(Rng& rng, const std::array<int, N>& counts) {
  std::vector<int> present;
  for (size_t i = 0; i < N; ++i)
    if (counts[i] > 0) present.push_back(static_cast<int>(i));
  if (!present.empty() && rng.bernoulli(0.75)) return rng.pick(present);
  return static_cast<int>(rng.uniform_int(0, static_cast<int64_t>(N) - 1));
}

const std::vector<std::string> kSingleTypes = {"color_of_shape", "shape_of_color", "count_shape",
                                               "count_color",    "exists",         "position",
                                               "left_of"};

// A question of `type` about `scene`, or false when that type is not well defined for it.
bool make_single(Rng& rng, const Scene& scene, const std::string& type, QuestionAnswer& qa) {
  const Counts counts(scene);
  const auto& objects = scene.objects;
  qa.type = type;
  if (type == "color_of_shape") {
    std::vector<const Object*> unique;
    for (const Object& o : objects)
      if (counts.shape[static_cast<int>(o.shape)] == 1) unique.push_back(&o);
    if (unique.empty()) return false;
    const Object& o = *rng.pick(unique);
    qa.text = phrase(rng, templates("color_of_shape"), {{"{shape}", shape_name(o.shape)}});
    qa.subjects = {{-1, static_cast<int>(o.shape)}};
    qa.answer = color_name(o.color);
    return true;
  }
  if (type == "shape_of_color") {
    std::vector<const Object*> unique;
    for (const Object& o : objects)
      if (counts.color[static_cast<int>(o.color)] == 1) unique.push_back(&o);
    if (unique.empty()) return false;
    const Object& o = *rng.pick(unique);
    qa.text = phrase(rng, templates("shape_of_color"), {{"{color}", color_name(o.color)}});
    qa.subjects = {{static_cast<int>(o.color), -1}};
    qa.answer = shape_name(o.shape);
    return true;
  }
  if (type == "count_shape") {
    const int s = count_subject(rng, counts.shape);
    qa.text = phrase(rng, templates("count_shape"), {{"{shapes}", shape_plural(static_cast<Shape>(s))}});
    qa.subjects = {{-1, s}};
    qa.answer = std::to_string(counts.shape[s]);
    return true;
  }
  if (type == "count_color") {
    const int c = count_subject(rng, counts.color);
    qa.text = phrase(rng, templates("count_color"), {{"{color}", color_name(static_cast<Color>(c))}});
    qa.subjects = {{c, -1}};
    qa.answer = std::to_string(counts.color[c]);
    return true;
  }
  if (type == "exists") {
    Color color;
    Shape shape;
    if (rng.bernoulli(0.5)) {  // yes: a present combination
      const Object& o = rng.pick(objects);
      color = o.color;
      shape = o.shape;
    } else {  // no: an absent one (there are 24 combinations and at most 6 objects)
      std::vector<std::pair<int, int>> absent;
      for (int c = 0; c < kNumColors; ++c)
        for (int s = 0; s < kNumShapes; ++s)
          if (counts.combo[c][s] == 0) absent.emplace_back(c, s);
      const auto [c, s] = rng.pick(absent);
      color = static_cast<Color>(c);
      shape = static_cast<Shape>(s);
    }
    qa.text = phrase(rng, templates("exists"), {{"{color}", color_name(color)}, {"{shape}", shape_name(shape)}});
    qa.subjects = {{static_cast<int>(color), static_cast<int>(shape)}};
    qa.answer = counts.combo[static_cast<int>(color)][static_cast<int>(shape)] > 0 ? "yes" : "no";
    return true;
  }
  const double mid = (scene.image_size - 1) / 2.0;  // the image spans [-0.5, size - 0.5]
  const double margin = position_margin(scene.image_size);
  if (type == "position") {
    std::vector<const Object*> clear;
    for (const Object& o : objects)
      if (counts.unique_combo(o) && std::abs(o.cx - mid) >= margin && std::abs(o.cy - mid) >= margin)
        clear.push_back(&o);
    if (clear.empty()) return false;
    const Object& o = *rng.pick(clear);
    qa.text = phrase(rng, templates("position"), {{"{object}", the(o)}});
    qa.subjects = {subject(o)};
    qa.answer = std::string(o.cy < mid ? "top" : "bottom") + (o.cx < mid ? " left" : " right");
    return true;
  }
  if (type == "left_of") {
    std::vector<std::pair<const Object*, const Object*>> pairs;
    for (const Object& a : objects)
      for (const Object& b : objects)
        if (&a != &b && counts.unique_combo(a) && counts.unique_combo(b) && std::abs(a.cx - b.cx) >= margin)
          pairs.emplace_back(&a, &b);
    if (pairs.empty()) return false;
    const auto [a, b] = rng.pick(pairs);
    qa.text = phrase(rng, templates("left_of"), {{"{a}", the(*a)}, {"{b}", the(*b)}});
    qa.subjects = {subject(*a), subject(*b)};
    qa.answer = a->cx < b->cx ? "yes" : "no";
    return true;
  }
  TRIMKV_ASSERT(false, "unknown question type ", type);
  return false;
}

}  // namespace

// Every wording of each question type: the first is the issue-6 grammar, the rest its
// paraphrases. Placeholders: {shape}, {shapes}, {color}, {object} / {a} / {b} ("red circle").
const std::vector<const char*>& templates(const std::string& type) {
  static const std::vector<std::pair<std::string, std::vector<const char*>>> kTemplates = {
      {"color_of_shape",
       {"What color is the {shape}?", "What colour is the {shape}?", "Which color is the {shape}?",
        "What is the color of the {shape}?", "Tell me the color of the {shape}."}},
      {"shape_of_color",
       {"What shape is the {color} object?", "What shape is the {color} one?", "Which shape is {color}?",
        "What is the shape of the {color} object?", "Name the shape of the {color} object."}},
      {"count_shape",
       {"How many {shapes} are there?", "How many {shapes} do you see?", "Count the {shapes}.",
        "What is the number of {shapes}?", "How many {shapes} are shown?"}},
      {"count_color",
       {"How many {color} objects are there?", "How many {color} shapes are there?",
        "How many {color} things do you see?", "Count the {color} objects.", "What is the number of {color} objects?"}},
      {"exists",
       {"Is there a {color} {shape}?", "Do you see a {color} {shape}?", "Is a {color} {shape} present?",
        "Can you find a {color} {shape}?", "Is there any {color} {shape}?"}},
      {"position",
       {"Where is the {object}?", "Where's the {object}?", "In which corner is the {object}?",
        "Which quadrant is the {object} in?", "Where is the {object} located?"}},
      {"left_of",
       {"Is the {a} left of the {b}?", "Is the {a} to the left of the {b}?", "Is the {a} on the left of the {b}?",
        "Is the {a} further left than the {b}?"}},
      {"more_shape",
       {"Which image has more {shapes}?", "Which image has the most {shapes}?", "Which picture has more {shapes}?",
        "Which image contains more {shapes}?"}},
      {"total_shape",
       {"How many {shapes} are there in all images?", "How many {shapes} are there in total?",
        "How many {shapes} are in all the images?", "Count the {shapes} in all images.",
        "How many {shapes} do all the images have together?"}},
  };
  for (const auto& [name, wordings] : kTemplates)
    if (name == type) return wordings;
  TRIMKV_ASSERT(false, "no templates for question type ", type);
  return kTemplates.front().second;
}

const std::vector<std::string>& question_types() {
  static const std::vector<std::string> kTypes = [] {
    std::vector<std::string> types = kSingleTypes;
    for (const auto& t : kSingleTypes) types.push_back("in_image_" + t);
    types.push_back("more_shape");
    types.push_back("total_shape");
    return types;
  }();
  return kTypes;
}

QuestionAnswer single_image_question(Rng& rng, const Scene& scene) {
  // A uniformly chosen type; types not defined for this scene are dropped and another drawn
  // (counts and "is there" always are).
  std::vector<std::string> types = kSingleTypes;
  QuestionAnswer qa;
  while (!types.empty()) {
    const size_t i = rng.index(types.size());
    if (make_single(rng, scene, types[i], qa)) return qa;
    types.erase(types.begin() + static_cast<std::ptrdiff_t>(i));
  }
  TRIMKV_ASSERT(false, "no question type is defined for a scene");
  return qa;
}

bool multi_image_question(Rng& rng, const std::vector<Scene>& scenes, int n_shown, QuestionAnswer& qa) {
  TRIMKV_ASSERT(n_shown >= 2 && n_shown <= static_cast<int>(scenes.size()));
  std::vector<std::array<int, kNumShapes>> per_image;
  std::array<int, kNumShapes> total{};
  for (int k = 0; k < n_shown; ++k) {
    per_image.push_back(Counts(scenes[k]).shape);
    for (int s = 0; s < kNumShapes; ++s) total[s] += per_image.back()[s];
  }
  qa.about.clear();
  for (int k = 0; k < n_shown; ++k) qa.about.push_back(k);

  std::vector<int> more;        // shapes with a unique, non-zero maximum over the images
  std::vector<int> more_image;  // and the image holding it
  std::vector<int> totals;      // shapes whose total is a single digit
  for (int s = 0; s < kNumShapes; ++s) {
    int best = 0, n_best = 0, best_image = -1;
    for (int k = 0; k < n_shown; ++k) {
      const int c = per_image[k][s];
      if (c > best) best = c, n_best = 1, best_image = k;
      else if (c == best) ++n_best;
    }
    if (best > 0 && n_best == 1) {
      more.push_back(s);
      more_image.push_back(best_image);
    }
    if (total[s] <= 9) totals.push_back(s);
  }
  std::vector<std::string> types;
  if (!more.empty()) types.push_back("more_shape");
  if (!totals.empty()) types.push_back("total_shape");
  if (types.empty()) return false;
  qa.type = rng.pick(types);
  if (qa.type == "more_shape") {
    const size_t i = rng.index(more.size());
    qa.text = phrase(rng, templates("more_shape"), {{"{shapes}", shape_plural(static_cast<Shape>(more[i]))}});
    qa.subjects = {{-1, more[i]}};
    qa.answer = "image " + std::to_string(more_image[i] + 1);
  } else {
    std::vector<int> present;
    for (int s : totals)
      if (total[s] > 0) present.push_back(s);
    const int s = !present.empty() && rng.bernoulli(0.75) ? rng.pick(present) : rng.pick(totals);
    qa.text = phrase(rng, templates("total_shape"), {{"{shapes}", shape_plural(static_cast<Shape>(s))}});
    qa.subjects = {{-1, s}};
    qa.answer = std::to_string(total[s]);
  }
  return true;
}

}  // namespace trimkv::vision::world
