#include "demo_world_hint.h"

#include <QCoreApplication>

#include "trimkv/vision/idefics3.h"
#include "trimkv/vision/world.h"

bool isDemoWorldModel(const QString& dir) { return trimkv::vision::is_demo_world_model(dir.toStdString()); }

QString demoWorldHint() {
  return QCoreApplication::translate(
      "DemoWorld",
      "<b>Demo model</b>: a 2.4 M-parameter model trained here on one small world, not a general model. It knows "
      "four shapes (circle, square, triangle, star), six colours (red, green, blue, yellow, purple, orange), "
      "counting, positions (top left … bottom right, left of) and several images (\"In image 2, …\", \"Which image "
      "has more stars?\"). <b>Try your own</b>: attach a picture of coloured shapes and ask \"What color is the "
      "circle?\" or \"How many red objects are there?\". For real photos, open a SmolVLM or Qwen-VL checkpoint.");
}

bool inDemoWorld(const QString& question) {
  return trimkv::vision::world::parse_question(question.toStdString()).has_value();
}

QString outsideDemoWorldNote() {
  return QCoreApplication::translate(
      "DemoWorld",
      "<b>Outside the demo model's world</b>: it only knows coloured shapes, counts, positions and image numbers, "
      "so its answer to this is a guess.");
}
