// trimkv-studio: the TrimKV Studio desktop application (issue 7).
//   trimkv-studio [--model DIR]            the window, on DIR or the embedded demo model
//   trimkv-studio --screenshot FILE.png    sample conversation, render the window, save, exit
//   trimkv-studio --prompt A [--image F] [--prompt B] --send
//                                          sends the prompts in turn once the model is loaded
//   trimkv-studio --version                the version and git revision (no display needed)
#include <QApplication>
#include <QCommandLineParser>
#include <QTemporaryDir>
#include <QTimer>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>

#include "main_window.h"
#include "chat_input.h"
#include "quit_signals.h"
#include "sample_turn.h"
#include "scripted_turns.h"
#include "screenshot_run.h"
#include "trimkv/core/compute_device.h"
#include "trimkv/core/cpu_tuning.h"
#include "trimkv/core/default_model.h"
#include "trimkv/core/version.h"

int main(int argc, char** argv) {
  // --version needs no display: answered before Qt opens one.
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--version") || !std::strcmp(argv[i], "-v")) {
      std::printf("%s\n", trimkv::version_line("trimkv-studio").c_str());
      return 0;
    }
  trimkv::tune_cpu_runtime(argv);  // before Qt or any thread exists (may re-execute once)
  QuitSignals::startWatcher();      // before any other thread: no signal lands on one that computes
  QApplication app(argc, argv);
  QApplication::setApplicationVersion(QString::fromStdString(trimkv::version_line("trimkv-studio")));
  QApplication::setApplicationName(QStringLiteral("TrimKV Studio"));
  QApplication::setOrganizationName(QStringLiteral("TrimKV"));
  // Ctrl+C or SIGTERM close the window as its close button does.
  QuitSignals quitSignals;
  QObject::connect(&quitSignals, &QuitSignals::received, &app, [](int signo) {
    QApplication::closeAllWindows();
    QCoreApplication::exit(128 + signo);
  });

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Multi-turn image chat with a live view of the KV cache under eviction."));
  parser.addHelpOption();
  parser.addVersionOption();
  // Each option joins the parser where it is declared: --help lists them in this order.
  auto option = [&parser](const char* name, const QString& help, const char* valueName = nullptr) {
    QCommandLineOption o(QString::fromLatin1(name), help);
    if (valueName) o.setValueName(QString::fromLatin1(valueName));
    parser.addOption(o);
    return o;
  };
  const QCommandLineOption modelOpt =
      option("model", QStringLiteral("Model folder (default: the embedded demo model)."), "DIR");
  const QCommandLineOption shotOpt = option(
      "screenshot", QStringLiteral("Run the sample conversation, save the window as FILE (PNG) and exit."), "FILE");
  const QCommandLineOption threadsOpt =
      option("threads", QStringLiteral("CPU threads for the model's math (default: every core)."), "N");
  const QCommandLineOption weightsOpt = option(
      "weights",
      QStringLiteral("Hold the weights as f32, bf16, f16, q8 or q4 (default: the checkpoint's own bf16/f16, else f32)."),
      "FMT");
  const QCommandLineOption kvDtypeOpt = option(
      "kv-dtype",
      QStringLiteral("Store the KV cache's K and V as f32, bf16 or f16 (default: f16 for 16-bit and quantised checkpoints, else f32)."),
      "T");
  const QCommandLineOption deviceOpt = option(
      "device", QStringLiteral("Where the model runs: cpu, cuda or auto (the GPU when one can be used; default)."), "D");
  const QCommandLineOption imageSizeOpt = option(
      "image-size",
      QStringLiteral("Image resolution, pixels on a side (SmolVLM: longest edge; Qwen-VL: at most PX x PX pixels; default: the processor's own)."),
      "PX");
  const QCommandLineOption budgetOpt =
      option("budget", QStringLiteral("KV entries per head the model's default policy starts at."), "M");
  const QCommandLineOption promptOpt = option(
      "prompt",
      QStringLiteral("The first message (instead of the sample question); repeated, the turns --send sends (else the first is used)."),
      "TEXT");
  const QCommandLineOption imageOpt = option(
      "image", QStringLiteral("An image for the first message (repeatable; instead of the sample's)."), "FILE");
  const QCommandLineOption sendOpt =
      option("send", QStringLiteral("Send the --prompt messages (each after the previous answer) once the model is loaded, "
                                    "instead of leaving the first in the input; the last conversation is not offered, "
                                    "and this one is autosaved in its place."));
  parser.process(app);

  QString modelDir = parser.value(modelOpt);
  QString modelError;
  if (modelDir.isEmpty()) {
    try {
      modelDir = QString::fromStdString(trimkv::default_model_dir());
    } catch (const std::exception& e) {
      modelError = QString::fromStdString(e.what());
    }
  }

  MainWindow window;
  // A whole number from 0 to hi (0 when absent), or -1 after saying what is wrong.
  auto count = [&parser](const QCommandLineOption& opt, const char* what, int hi) {
    if (!parser.isSet(opt)) return 0;
    bool ok = false;
    const int n = parser.value(opt).toInt(&ok);
    if (ok && n >= 0 && n <= hi) return n;
    std::fprintf(stderr, "trimkv-studio: --%s wants %s from 0 to %d, got '%s'\n", qPrintable(opt.names().first()), what,
                 hi, qPrintable(parser.value(opt)));
    return -1;
  };
  // The same ranges as the command line's (app/cli): more threads than the machine has are
  // clamped with a warning when the model loads.
  const int threads = count(threadsOpt, "a whole number", 1 << 20);
  const int budget = count(budgetOpt, "a whole number of entries per head", std::numeric_limits<int>::max());
  const int imageSize = count(imageSizeOpt, "a whole number of pixels", 16384);
  if (threads < 0 || budget < 0 || imageSize < 0) return 2;
  const QString weights = parser.value(weightsOpt);
  const QString kvDtype = parser.value(kvDtypeOpt);
  const QString device = parser.value(deviceOpt) == QLatin1String("auto") ? QString() : parser.value(deviceOpt);
  try {
    trimkv::check_weights_option(weights.toStdString());
    trimkv::check_kv_dtype_option(kvDtype.toStdString());
    trimkv::check_device_option(device.toStdString());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trimkv-studio: %s\n", e.what());
    return 2;
  }
  if (threads > 0) window.setThreads(threads);
  if (!weights.isEmpty()) window.setWeights(weights);
  if (!kvDtype.isEmpty()) window.setKvDtype(kvDtype);
  if (!device.isEmpty()) window.setDevice(device);
  if (imageSize > 0) window.setImageSize(imageSize);
  if (budget > 0) window.setStartBudget(budget);
  const bool ownTurn = parser.isSet(promptOpt) || parser.isSet(imageOpt);
  const QString ownText = parser.isSet(promptOpt) ? parser.values(promptOpt).first() : QString();
  const QStringList ownImages = parser.values(imageOpt);
  if (parser.isSet(sendOpt) && !parser.isSet(promptOpt)) {
    std::fprintf(stderr, "trimkv-studio: --send needs at least one --prompt\n");
    return 2;
  }
  if (parser.isSet(sendOpt) && parser.isSet(shotOpt)) {
    std::fprintf(stderr, "trimkv-studio: --send and --screenshot do not go together (--screenshot runs one turn)\n");
    return 2;
  }
  if (parser.isSet(shotOpt)) {
    if (!modelError.isEmpty()) {
      std::fprintf(stderr, "trimkv-studio: --screenshot failed: %s\n", qPrintable(modelError));
      return 1;
    }
    window.resize(1400, 860);
    window.show();
    ScreenshotRun run(&window, parser.value(shotOpt));
    if (ownTurn) run.setTurn(ownText, ownImages);
    QObject::connect(&run, &ScreenshotRun::finished, &app, [](int code) { QCoreApplication::exit(code); });
    run.start(modelDir);
    return app.exec();
  }

  window.restoreSettings();  // a stored thread count, precision or budget yields to --threads / --weights / --budget
  if (threads > 0) window.setThreads(threads);
  if (!weights.isEmpty()) window.setWeights(weights);
  if (!kvDtype.isEmpty()) window.setKvDtype(kvDtype);
  if (!device.isEmpty()) window.setDevice(device);
  if (imageSize > 0) window.setImageSize(imageSize);
  if (budget > 0) window.setStartBudget(budget);
  window.setAutosaveFile(MainWindow::defaultAutosaveFile());
  // The message being written is kept as it is typed; --prompt / --image / --send fill the input
  // themselves, so they leave the kept one alone for the next plain start.
  if (!ownTurn && !parser.isSet(sendOpt)) window.setDraftFile(MainWindow::defaultDraftFile());
  window.show();
  // The sample conversation, ready to send: its question in the input, its image attached.
  QTemporaryDir samples;
  if (parser.isSet(sendOpt)) {  // a scripted conversation: nothing to offer, nothing to fill in
    auto* script = new ScriptedTurns(&window, parser.values(promptOpt), ownImages);
    QObject::connect(&window, &MainWindow::modelLoaded, script, &ScriptedTurns::start, Qt::SingleShotConnection);
  } else {
    QObject::connect(&window, &MainWindow::modelLoaded, &window, [&window, &samples, ownTurn, ownText, ownImages] {
      window.offerAutosaveRestore();  // the last conversation, if there is one
      window.restoreDraft();          // and the message that was being written
      if (!window.input()->toPlainText().isEmpty() || !window.attachments().isEmpty()) return;
      if (ownTurn) {  // --prompt / --image: ready to send
        window.input()->setPlainText(ownText);
        window.addAttachments(ownImages);
        return;
      }
      if (!samples.isValid()) return;
      try {
        const SampleTurn turn = makeSampleTurn(samples.path(), window.model().vision.takes_images());
        window.input()->setPlainText(turn.text);
        window.addAttachments(turn.images);
      } catch (const std::exception&) {
        // No sample then: the empty input is just as usable.
      }
    }, Qt::SingleShotConnection);
  }
  if (modelError.isEmpty()) {
    window.openModel(modelDir);
  } else {
    // No model yet: the window stays usable (Open folder…) and says why.
    QTimer::singleShot(0, &window, [&window, modelError] { window.showError(QObject::tr("No default model"), modelError); });
  }
  return app.exec();
}
