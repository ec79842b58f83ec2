// The guided tour: a small panel over the main window that walks through steps (Back / Next /
// Close), each explaining one widget and drawing a highlight frame around it. A step may do
// something when it is shown (switch a tab so its widget is visible) and offer one action button
// ("Send it", "Halve the budget") that does what the step describes.
#pragma once
#include <QFrame>
#include <QPointer>
#include <QString>
#include <functional>
#include <vector>

class QLabel;
class QPushButton;
class QTimer;

// The orange frame drawn around the current step's widget; it lets clicks through.
class TourHighlight : public QWidget {
  Q_OBJECT

 public:
  explicit TourHighlight(QWidget* parent);
  // Covers `target` (mapped into the parent), or hides when it is null or not visible.
  void follow(QWidget* target);
  QWidget* target() const { return m_target; }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  QPointer<QWidget> m_target;
};

struct TourStep {
  QString title;
  QString text;  // rich text
  std::function<QWidget*()> target;  // the widget to highlight (looked up when shown)
  std::function<void()> enter;       // run when the step is shown (may be empty)
  QString actionLabel;               // empty: no action button
  std::function<void()> action;
};

class TourPanel : public QFrame {
  Q_OBJECT

 public:
  // `window`: where the panel and the highlight live (the main window).
  explicit TourPanel(QWidget* window);

  void setSteps(std::vector<TourStep> steps);
  // The panel sits over the lower left of `anchor` (default: of the window).
  void setAnchor(QWidget* anchor) { m_anchor = anchor; }
  int stepCount() const { return static_cast<int>(m_steps.size()); }
  int currentStep() const { return m_current; }
  void start();  // shows step 0
  void showStep(int index);
  void next();
  void back();
  void stop();  // hides the panel and the highlight
  QWidget* currentTarget() const;
  // Puts the panel and the highlight where they belong (after the window changed size).
  void reposition() { place(); }
  TourHighlight* highlight() const { return m_highlight; }
  QPushButton* nextButton() const { return m_next; }
  QPushButton* backButton() const { return m_back; }
  QPushButton* actionButton() const { return m_action; }
  QPushButton* closeButton() const { return m_close; }

 Q_SIGNALS:
  void stepShown(int index);
  void closed();

 private:
  void place();  // bottom-left of the window; the highlight follows its target

  std::vector<TourStep> m_steps;
  int m_current = -1;
  QLabel* m_title = nullptr;
  QLabel* m_text = nullptr;
  QPushButton* m_back = nullptr;
  QPushButton* m_next = nullptr;
  QPushButton* m_action = nullptr;
  QPushButton* m_close = nullptr;
  TourHighlight* m_highlight = nullptr;
  QTimer* m_follow = nullptr;
  QPointer<QWidget> m_anchor;  // keeps the highlight on its widget while splitters move
};
