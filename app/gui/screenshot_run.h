// `trimkv-studio --screenshot FILE.png`: drives a MainWindow through the sample conversation on
// the model it was given, selects an informative head, renders the window (QWidget::grab) into
// FILE.png and reports the outcome through finished(exitCode): 0 saved; 1 an error (printed to
// stderr: the model, the image, the answer or the file); 2 timed out.
#pragma once
#include <QObject>
#include <QString>
#include <QTemporaryDir>
#include <QTimer>

class MainWindow;

class ScreenshotRun : public QObject {
  Q_OBJECT

 public:
  static constexpr int kTimeoutMs = 10 * 60 * 1000;

  ScreenshotRun(MainWindow* window, QString outputPath, QObject* parent = nullptr);
  void start(const QString& modelDir);

 Q_SIGNALS:
  void finished(int exitCode);

 private:
  void runSample();
  void capture();
  void fail(int code, const QString& message);

  MainWindow* m_window;
  QString m_output;
  QTemporaryDir m_samples;
  QTimer m_timeout;
  bool m_done = false;
};
