// Pieces of the world generator shared by its source files (not public API).
#pragma once
#include <array>
#include <string>
#include <vector>

#include "trimkv/vision/world.h"
#include "trimkv/core/portable_rng.h"

namespace trimkv::vision::world {

using Rng = PortableRng;

// A scene of options.min_objects..max_objects non-overlapping objects on a random background.
Scene sample_scene(Rng& rng, const WorldOptions& options);

// A question, its answer and the images it is about (0-based).
struct QuestionAnswer {
  std::string text, answer, type;
  std::vector<int> about;
  std::vector<Subject> subjects;
};

// Every wording of a question type (color_of_shape ... left_of, more_shape, total_shape): the
// issue-6 template first, then its paraphrases; placeholders {shape}, {shapes}, {color} and
// {object} / {a} / {b} (a colour and a shape, "red circle").
const std::vector<const char*>& templates(const std::string& type);

// A question about one scene, of a random single-image type that is well defined for it.
QuestionAnswer single_image_question(Rng& rng, const Scene& scene);
// A question about all of scenes[0, n_shown) ("more", "in all images"); false when none of
// those types is well defined (e.g. no unique maximum and every total above 9).
bool multi_image_question(Rng& rng, const std::vector<Scene>& scenes, int n_shown, QuestionAnswer& out);

// The x where each edge of `polygon` crosses the horizontal line at y, in edge order (the even-odd
// rule of shape_covers: (x, y) is inside when an odd number of them lie to the right of x).
// A rasteriser computes them once per sample row instead of once per sample.
template <class F>
void for_each_crossing(const std::vector<std::array<double, 2>>& polygon, double y, F&& f) {
  for (size_t i = 0, j = polygon.size() - 1; i < polygon.size(); j = i++) {
    const double xi = polygon[i][0], yi = polygon[i][1], xj = polygon[j][0], yj = polygon[j][1];
    if ((yi > y) != (yj > y)) f((xj - xi) * (y - yi) / (yj - yi) + xi);
  }
}

}  // namespace trimkv::vision::world
