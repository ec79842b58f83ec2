// The Studio's inspector at real-model scale: the time of one frame (a new snapshot handed to the
// head grid, the head strip and the image overlay, then each painted) for a synthetic cache of
// 64 layers x 8 KV heads over a 16K-position conversation (ten 36x36-token images and text),
// every head keeping every entry (the worst case: 8.4M entries) and keeping a random half. The
// strip paints what a 300-pixel-high viewport of its scroll area shows, as on screen. Prints a
// Markdown table of median and worst frame times (target: <= 16 ms). Not a test: run by hand,
// QT_QPA_PLATFORM=offscreen build/tests/bench_studio_paint [repeats].
#include <QApplication>
#include <QElapsedTimer>
#include <QImage>
#include <QPainter>
#include <QScrollArea>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "head_grid.h"
#include "head_strip.h"
#include "image_overlay.h"

namespace {

constexpr int kLayers = 64, kHeads = 8, kTokens = 16384, kSide = 36, kImages = 10;

struct Frame {
  std::shared_ptr<const trimkv::KvSnapshot> kv;
  std::shared_ptr<const std::vector<trimkv::vision::StreamToken>> tokens;
  std::vector<trimkv::ImageRecord> images;
};

Frame makeFrame(double keep, uint32_t seed) {
  auto tokens = std::make_shared<std::vector<trimkv::vision::StreamToken>>(kTokens);
  const int per_image = kSide * kSide, gap = (kTokens - kImages * per_image) / (kImages + 1);
  for (int t = 0; t < kTokens; ++t) {
    trimkv::vision::StreamToken& tok = (*tokens)[static_cast<size_t>(t)];
    tok.id = 100 + t % 1000;
    tok.text = "tok";
    tok.info.token_index = t;
    const int block = t / (gap + per_image), in = t % (gap + per_image);
    if (block < kImages && in >= gap) {
      const int k = in - gap;
      tok.info.modality = trimkv::Modality::Image;
      tok.info.image_id = static_cast<int16_t>(block);
      tok.info.patch_row = static_cast<int16_t>(k / kSide);
      tok.info.patch_col = static_cast<int16_t>(k % kSide);
    }
  }
  auto kv = std::make_shared<trimkv::KvSnapshot>();
  kv->n_tokens = kTokens;
  kv->policy = "dbtrimkv";
  kv->geometry.n_layer = kLayers;
  kv->geometry.n_kv_head = kHeads;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  kv->heads.resize(static_cast<size_t>(kLayers * kHeads));
  kv->keepers.assign(kTokens, 0);
  for (trimkv::HeadSnapshot& hs : kv->heads) {
    hs.kept_bits.assign((kTokens + 63) / 64, 0);
    for (int t = 0; t < kTokens; ++t) {
      if (keep < 1.0 && u(rng) > keep) continue;
      const trimkv::TokenInfo& info = (*tokens)[static_cast<size_t>(t)].info;
      trimkv::SnapshotEntry e;
      e.token_index = t;
      e.log_beta = -u(rng);
      e.score = u(rng);
      e.modality = info.modality;
      e.image_id = info.image_id;
      e.patch_row = info.patch_row;
      e.patch_col = info.patch_col;
      hs.entries.push_back(e);
      hs.counts.add(info.modality);
      ++kv->keepers[static_cast<size_t>(t)];
      hs.kept_bits[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64);
    }
    kv->totals += hs.counts;
    kv->total_entries += hs.counts.total();
  }
  trimkv::ImageRecord r;
  r.image_id = kImages - 1;
  r.width = r.height = r.resized_width = r.resized_height = kSide * 28;
  r.n_tiles = 1;
  r.grid_rows = r.grid_cols = r.grid_side = kSide;
  r.n_image_tokens = per_image;
  Frame f;
  f.kv = std::move(kv);
  f.tokens = std::move(tokens);
  for (int k = 0; k < kImages; ++k) {
    r.image_id = static_cast<int16_t>(k);
    f.images.push_back(r);
  }
  return f;
}

struct Times {
  std::vector<double> grid, strip, overlay, total;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double worst(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  HeadGrid grid;
  grid.resize(520, 560);
  QScrollArea scroll;
  scroll.setWidgetResizable(true);
  auto* strip = new HeadStrip;
  scroll.setWidget(strip);
  scroll.resize(620, 300);
  ImageOverlay overlay;
  overlay.resize(520, 420);
  QImage canvas(700, 700, QImage::Format_ARGB32_Premultiplied);

  std::printf("| cache (64 layers x 8 KV heads, 16,384 positions) | mode | grid ms | strip ms | overlay ms | frame ms (median / worst) |\n");
  std::printf("|---|---|---:|---:|---:|---:|\n");
  for (double keep : {1.0, 0.5}) {
    const Frame f = makeFrame(keep, 7);
    for (bool all : {false, true}) {
      Times t;
      strip->setAllHeads(all);
      overlay.setAllHeads(all);
      for (int i = 0; i < repeats; ++i) {
        const int layer = i % kLayers, head = i % kHeads;
        QElapsedTimer clock;
        clock.start();
        grid.setSnapshot(f.kv, f.tokens.get());
        grid.setSelectedHead(layer, head);
        {
          QPainter p(&canvas);
          grid.render(&p);
        }
        const double g = clock.nsecsElapsed() / 1e6;
        strip->setFrame(f.kv, f.tokens);
        strip->setHead(layer, head);
        scroll.widget()->resize(scroll.viewport()->width(), strip->heightForWidth(scroll.viewport()->width()));
        const int y = (i * 997) % std::max(1, strip->height() - 300);  // somewhere in the conversation
        {
          QPainter p(&canvas);
          strip->render(&p, QPoint(), QRegion(0, y, scroll.viewport()->width(), 300));
        }
        const double s = clock.nsecsElapsed() / 1e6 - g;
        overlay.setFrame(f.images, f.kv, f.tokens);
        overlay.setHead(layer, head);
        {
          QPainter p(&canvas);
          overlay.render(&p);
        }
        const double total = clock.nsecsElapsed() / 1e6;
        t.grid.push_back(g);
        t.strip.push_back(s);
        t.overlay.push_back(total - g - s);
        t.total.push_back(total);
      }
      std::printf("| %s | %s | %.1f | %.1f | %.1f | %.1f / %.1f |\n",
                  keep >= 1.0 ? "every head keeps all (8.4M entries)" : "each head keeps a random half (4.2M)",
                  all ? "all heads" : "one head", median(t.grid), median(t.strip), median(t.overlay), median(t.total),
                  worst(t.total));
    }
  }
  return 0;
}
