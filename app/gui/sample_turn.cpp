#include "sample_turn.h"

#include <QDir>
#include <stb/stb_image_write.h>  // the implementation is compiled once, in vision/

#include "trimkv/core/error.h"
#include "trimkv/vision/world.h"

namespace world = trimkv::vision::world;

SampleTurn makeSampleTurn(const QString& dir, bool withImages) {
  if (!withImages)
    return {QStringLiteral("In two sentences: what does a language model keep in its KV cache, and why does it grow?"),
            {}};
  world::WorldOptions options;  // the demo model's world
  options.max_images = 1;
  options.max_turns = 1;
  // A fixed test-split conversation (a bare placeholder, the issue-6 wording): the demo model never
  // trained on it, and answers it right ("blue": the circle among two orange stars and a yellow one).
  constexpr uint64_t kSeed = 2026;
  const world::Conversation conv = world::make_conversation(kSeed, world::Split::Test, 68, options);
  SampleTurn turn;
  turn.text = QString::fromStdString(conv.turns.front().text);
  for (size_t k = 0; k < conv.scenes.size(); ++k) {
    const world::Scene& scene = conv.scenes[k];
    const std::vector<uint8_t> rgb = world::render_scene(scene);
    const QString path = QDir(dir).filePath(QStringLiteral("sample-%1.png").arg(k + 1));
    const int s = scene.image_size;
    TRIMKV_CHECK(stbi_write_png(path.toLocal8Bit().constData(), s, s, 3, rgb.data(), s * 3) != 0, Io,
                 "cannot write the sample image ", path.toStdString());
    turn.images << path;
  }
  return turn;
}
