// SPDX-License-Identifier: Apache-2.0
#include "base/file_watcher.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/manual_env.h"
#include "tests/testing/temp_dir.h"

namespace sluice::base {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;

void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc | std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

class FileWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(temp_.path().empty());
    dir_ = temp_.path();
    path_ = temp_.File("policies.yaml");
  }
  void TearDown() override { watcher_.reset(); }

  // A watcher that polls only when the test says (PollOnce, or env_).
  FileWatcher& Watch(const std::string& initial) {
    watcher_ = std::make_unique<FileWatcher>(
        path_, FileWatcher::Options{absl::Hours(1), &env_},
        [this](const std::string& c) { changes_.push_back(c); },
        [this](const std::string& e) { errors_.push_back(e); });
    watcher_->Start(initial);
    return *watcher_;
  }

  testing::FakeClock clock_;
  testing::ManualEnv env_{&clock_};
  testing::TempDir temp_{"sluice_watch"};
  std::string dir_;
  std::string path_;
  std::unique_ptr<FileWatcher> watcher_;
  std::vector<std::string> changes_;
  std::vector<std::string> errors_;
};

TEST_F(FileWatcherTest, InitialContentsAreNotReported) {
  Write(path_, "v1");
  FileWatcher& w = Watch("v1");
  w.PollOnce();
  EXPECT_THAT(changes_, IsEmpty());
  EXPECT_THAT(errors_, IsEmpty());
}

TEST_F(FileWatcherTest, InPlaceEditWithSameSizeAndMtime) {
  Write(path_, "rate: 1");
  struct stat before;
  ASSERT_EQ(stat(path_.c_str(), &before), 0);
  FileWatcher& w = Watch("rate: 1");
  Write(path_, "rate: 2");
  // Put the old mtime back: only the contents tell the change.
  struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(utimensat(AT_FDCWD, path_.c_str(), times, 0), 0);
  w.PollOnce();
  EXPECT_THAT(changes_, ElementsAre("rate: 2"));
  w.PollOnce();  // no second report for the same contents
  EXPECT_THAT(changes_, SizeIs(1));
}

TEST_F(FileWatcherTest, TouchWithoutChangeIsNotReported) {
  Write(path_, "same");
  FileWatcher& w = Watch("same");
  ASSERT_EQ(utimensat(AT_FDCWD, path_.c_str(), nullptr, 0), 0);
  Write(path_, "same");
  w.PollOnce();
  EXPECT_THAT(changes_, IsEmpty());
}

TEST_F(FileWatcherTest, RenameOver) {
  Write(path_, "old");
  FileWatcher& w = Watch("old");
  Write(dir_ + "/.tmp", "new");
  ASSERT_EQ(rename((dir_ + "/.tmp").c_str(), path_.c_str()), 0);
  w.PollOnce();
  EXPECT_THAT(changes_, ElementsAre("new"));
}

TEST_F(FileWatcherTest, ConfigMapSymlinkSwap) {
  // The layout the kubelet writes for a mounted ConfigMap.
  ASSERT_EQ(mkdir((dir_ + "/..2026_a").c_str(), 0755), 0);
  Write(dir_ + "/..2026_a/policies.yaml", "generation a");
  ASSERT_EQ(symlink("..2026_a", (dir_ + "/..data").c_str()), 0);
  ASSERT_EQ(symlink("..data/policies.yaml", path_.c_str()), 0);
  FileWatcher& w = Watch("generation a");
  w.PollOnce();
  EXPECT_THAT(changes_, IsEmpty());

  // An update: new directory, new ..data link renamed atomically over the
  // old one, old directory removed.
  ASSERT_EQ(mkdir((dir_ + "/..2026_b").c_str(), 0755), 0);
  Write(dir_ + "/..2026_b/policies.yaml", "generation b");
  ASSERT_EQ(symlink("..2026_b", (dir_ + "/..data_tmp").c_str()), 0);
  ASSERT_EQ(rename((dir_ + "/..data_tmp").c_str(), (dir_ + "/..data").c_str()),
            0);
  ASSERT_EQ(system(("rm -rf '" + dir_ + "/..2026_a'").c_str()), 0);
  w.PollOnce();
  EXPECT_THAT(changes_, ElementsAre("generation b"));
  EXPECT_THAT(errors_, IsEmpty());
}

TEST_F(FileWatcherTest, ErrorsReportedOncePerStreak) {
  Write(path_, "a");
  FileWatcher& w = Watch("a");
  ASSERT_EQ(unlink(path_.c_str()), 0);
  w.PollOnce();
  w.PollOnce();
  ASSERT_THAT(errors_, SizeIs(1));
  EXPECT_THAT(errors_[0], ::testing::HasSubstr(path_));
  EXPECT_THAT(changes_, IsEmpty());  // last contents stay in force

  Write(path_, "a");  // back, unchanged: nothing to report
  w.PollOnce();
  EXPECT_THAT(changes_, IsEmpty());
  ASSERT_EQ(unlink(path_.c_str()), 0);
  w.PollOnce();
  EXPECT_THAT(errors_, SizeIs(2));  // a new streak
  Write(path_, "b");
  w.PollOnce();
  EXPECT_THAT(changes_, ElementsAre("b"));
}

TEST_F(FileWatcherTest, EmptyFileNeedsConfirmation) {
  Write(path_, "policies: [x]");
  FileWatcher& w = Watch("policies: [x]");
  Write(path_, "");  // an editor truncates before it writes
  w.PollOnce();
  EXPECT_THAT(changes_, IsEmpty());
  Write(path_, "policies: [y]");
  w.PollOnce();
  EXPECT_THAT(changes_, ElementsAre("policies: [y]"));

  Write(path_, "");  // really emptied
  w.PollOnce();
  w.PollOnce();
  EXPECT_THAT(changes_, ElementsAre("policies: [y]", ""));
}

TEST_F(FileWatcherTest, WithoutStartTheFirstPollReports) {
  Write(path_, "first");
  FileWatcher w(
      path_, FileWatcher::Options{},
      [this](const std::string& c) { changes_.push_back(c); },
      [this](const std::string& e) { errors_.push_back(e); });
  w.PollOnce();
  EXPECT_THAT(changes_, ElementsAre("first"));
}

TEST_F(FileWatcherTest, PollsEveryIntervalOnItsEnv) {
  Write(path_, "one");
  Watch("zero");
  clock_.Advance(absl::Minutes(59));
  EXPECT_EQ(env_.RunDue(), 0);
  EXPECT_THAT(changes_, IsEmpty());
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(env_.RunDue(), 1);
  EXPECT_THAT(changes_, ElementsAre("one"));
  Write(path_, "two");
  clock_.Advance(absl::Hours(1));
  EXPECT_EQ(env_.RunDue(), 1);
  EXPECT_THAT(changes_, ElementsAre("one", "two"));
  watcher_->Stop();
  Write(path_, "three");
  clock_.Advance(absl::Hours(1));
  EXPECT_EQ(env_.RunAll(), 0);
  EXPECT_THAT(changes_, ElementsAre("one", "two"));
}

TEST_F(FileWatcherTest, ThreadPollsAndStopsPromptly) {
  Write(path_, "one");
  absl::Notification seen;
  std::string got;
  FileWatcher w(
      path_, FileWatcher::Options{absl::Milliseconds(1)},
      [&](const std::string& c) {
        if (!seen.HasBeenNotified()) {
          got = c;
          seen.Notify();
        }
      },
      [](const std::string&) {});
  w.Start("zero");
  // Waits for the event, not for time to pass.
  ASSERT_TRUE(seen.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(got, "one");
  w.Stop();
}

TEST_F(FileWatcherTest, StopDoesNotWaitForTheInterval) {
  Write(path_, "x");
  FileWatcher w(
      path_, FileWatcher::Options{absl::Hours(1)}, [](const std::string&) {},
      [](const std::string&) {});
  w.Start("x");
  const absl::Time start = absl::Now();
  w.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

}  // namespace
}  // namespace sluice::base
