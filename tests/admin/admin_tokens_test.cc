// SPDX-License-Identifier: Apache-2.0
// The admin token file: the token set, and reloads driven by PollOnce (the
// watcher's own thread waits an hour, so nothing here sleeps).

#include "server/rpc/admin_tokens.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/stats_recorder.h"
#include "tests/testing/temp_dir.h"

namespace sluice::rpc {
namespace {

using ::testing::HasSubstr;

void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc | std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

TEST(AdminTokensTest, AcceptsEveryTokenAndNothingElse) {
  AdminTokens tokens({"alpha-123", "beta-4567"});
  EXPECT_TRUE(tokens.Accepts("alpha-123"));
  EXPECT_TRUE(tokens.Accepts("beta-4567"));
  for (const char* wrong :
       {"", "alpha-12", "alpha-1234", "beta-456", "Alpha-123", "gamma"}) {
    EXPECT_FALSE(tokens.Accepts(wrong)) << wrong;
  }
  EXPECT_EQ(tokens.CountNew({"alpha-123", "gamma", "delta"}), 2u);
  tokens.Replace({"gamma"});
  EXPECT_FALSE(tokens.Accepts("alpha-123"));
  EXPECT_TRUE(tokens.Accepts("gamma"));
  EXPECT_EQ(tokens.size(), 1u);
}

class AdminTokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(temp_.path().empty());
    path_ = temp_.File("token");
  }

  // Loads the file and starts a watcher whose own thread never gets to
  // poll during the test.
  std::unique_ptr<AdminTokenFile> Load() {
    absl::StatusOr<std::unique_ptr<AdminTokenFile>> file =
        AdminTokenFile::Load({path_, absl::Hours(1)});
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return nullptr;
    (*file)->StartWatching();
    return *std::move(file);
  }

  testing::TempDir temp_{"sluice_tokens"};
  std::string path_;
};

TEST_F(AdminTokenFileTest, StartupErrorsNameTheFlag) {
  absl::StatusOr<std::unique_ptr<AdminTokenFile>> file =
      AdminTokenFile::Load({path_});
  ASSERT_FALSE(file.ok());  // missing
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(),
              HasSubstr("--admin-token-file " + path_));
  Write(path_, "# nothing yet\n");
  file = AdminTokenFile::Load({path_});
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(),
              HasSubstr("--admin-token-file " + path_ + ": no token"));
}

TEST_F(AdminTokenFileTest, RotationAddThenRemove) {
  Write(path_, "old\n");
  std::unique_ptr<AdminTokenFile> file = Load();
  ASSERT_NE(file, nullptr);
  const AdminTokens& tokens = *file->tokens();
  file->PollOnce();  // unchanged: no reload
  EXPECT_EQ(file->stats().ok, 0u);

  Write(path_, "old\nnew\n");  // step 1: add the new token
  file->PollOnce();
  EXPECT_TRUE(tokens.Accepts("old"));
  EXPECT_TRUE(tokens.Accepts("new"));
  EXPECT_EQ(file->stats().ok, 1u);

  Write(path_, "# old removed after the clients moved\nnew\n");  // step 2
  file->PollOnce();
  EXPECT_FALSE(tokens.Accepts("old"));
  EXPECT_TRUE(tokens.Accepts("new"));
  EXPECT_EQ(file->stats().ok, 2u);
  EXPECT_EQ(file->stats().error, 0u);
}

TEST_F(AdminTokenFileTest, BadFileKeepsTheLastGoodSet) {
  Write(path_, "a\nb\n");
  std::unique_ptr<AdminTokenFile> file = Load();
  ASSERT_NE(file, nullptr);
  const AdminTokens& tokens = *file->tokens();

  ASSERT_EQ(unlink(path_.c_str()), 0);  // unreadable
  file->PollOnce();
  file->PollOnce();  // one error per streak
  EXPECT_EQ(file->stats().error, 1u);
  EXPECT_TRUE(tokens.Accepts("a"));
  EXPECT_TRUE(tokens.Accepts("b"));

  Write(path_, "# all commented out\n");  // readable, but no token
  file->PollOnce();
  EXPECT_EQ(file->stats().error, 2u);
  EXPECT_TRUE(tokens.Accepts("a"));

  Write(path_, "");  // empty: an error once the next poll confirms it
  file->PollOnce();
  EXPECT_EQ(file->stats().error, 2u);
  file->PollOnce();
  EXPECT_EQ(file->stats().error, 3u);
  EXPECT_TRUE(tokens.Accepts("a"));

  Write(path_, "two tokens\n");  // invalid line
  file->PollOnce();
  EXPECT_EQ(file->stats().error, 4u);
  EXPECT_TRUE(tokens.Accepts("b"));
  EXPECT_FALSE(tokens.Accepts("two"));

  Write(path_, "b\n");  // good again
  file->PollOnce();
  EXPECT_EQ(file->stats().ok, 1u);
  EXPECT_FALSE(tokens.Accepts("a"));
  EXPECT_TRUE(tokens.Accepts("b"));
}

// Its metric: the reloads by result, from 0.
TEST_F(AdminTokenFileTest, ReloadsAreItsMetric) {
  Write(path_, "a\n");
  std::unique_ptr<AdminTokenFile> file = Load();
  ASSERT_NE(file, nullptr);
  using sluice::testing::StatsRecorder;
  const std::string name = "sluice_admin_token_reloads_total";
  StatsRecorder before(*file);
  ASSERT_EQ(before.Find(name).size(), 2u);
  EXPECT_EQ(before.Sum(name, {{"result", "ok"}}), 0);
  EXPECT_EQ(before.Sum(name, {{"result", "error"}}), 0);
  Write(path_, "b\n");
  file->PollOnce();
  Write(path_, "c\n");
  file->PollOnce();
  Write(path_, "two tokens\n");
  file->PollOnce();
  StatsRecorder after(*file);
  EXPECT_EQ(after.Sum(name, {{"result", "ok"}}), 2);
  EXPECT_EQ(after.Sum(name, {{"result", "error"}}), 1);
}

TEST_F(AdminTokenFileTest, SecretSymlinkSwap) {
  // The layout the kubelet writes for a mounted Secret: token ->
  // ..data/token, ..data -> ..TIMESTAMP; an update swaps ..data atomically.
  const std::string dir = temp_.path();
  ASSERT_EQ(mkdir((dir + "/..2026_a").c_str(), 0755), 0);
  Write(dir + "/..2026_a/token", "first\n");
  ASSERT_EQ(symlink("..2026_a", (dir + "/..data").c_str()), 0);
  ASSERT_EQ(symlink("..data/token", path_.c_str()), 0);
  std::unique_ptr<AdminTokenFile> file = Load();
  ASSERT_NE(file, nullptr);
  EXPECT_TRUE(file->tokens()->Accepts("first"));

  ASSERT_EQ(mkdir((dir + "/..2026_b").c_str(), 0755), 0);
  Write(dir + "/..2026_b/token", "first\nsecond\n");
  ASSERT_EQ(symlink("..2026_b", (dir + "/..data_tmp").c_str()), 0);
  ASSERT_EQ(rename((dir + "/..data_tmp").c_str(), (dir + "/..data").c_str()),
            0);
  ASSERT_EQ(system(("rm -rf '" + dir + "/..2026_a'").c_str()), 0);
  file->PollOnce();
  EXPECT_TRUE(file->tokens()->Accepts("first"));
  EXPECT_TRUE(file->tokens()->Accepts("second"));
  EXPECT_EQ(file->stats().ok, 1u);
}

// A FIFO in place of the token file: refused at once (a blocking open
// would wait for a writer forever, and the watcher thread with it), the
// last good set stays, and a later rotation is still seen.
TEST_F(AdminTokenFileTest, FifoIsRefusedAndLaterRotationsAreSeen) {
  ASSERT_EQ(mkfifo(path_.c_str(), 0600), 0);
  absl::StatusOr<std::unique_ptr<AdminTokenFile>> at_start =
      AdminTokenFile::Load({path_});
  ASSERT_FALSE(at_start.ok());
  EXPECT_THAT(at_start.status().message(),
              HasSubstr("--admin-token-file " + path_ + ": " + path_ +
                        " is a FIFO, not a regular file"));
  ASSERT_EQ(unlink(path_.c_str()), 0);

  Write(path_, "old\n");
  std::unique_ptr<AdminTokenFile> file = Load();
  ASSERT_NE(file, nullptr);
  const AdminTokens& tokens = *file->tokens();
  ASSERT_EQ(unlink(path_.c_str()), 0);
  ASSERT_EQ(mkfifo(path_.c_str(), 0600), 0);
  file->PollOnce();  // returns: the FIFO is not waited on
  EXPECT_EQ(file->stats().error, 1u);
  EXPECT_TRUE(tokens.Accepts("old"));
  ASSERT_EQ(unlink(path_.c_str()), 0);
  Write(path_, "new\n");
  file->PollOnce();
  EXPECT_EQ(file->stats().ok, 1u);
  EXPECT_TRUE(tokens.Accepts("new"));
  EXPECT_FALSE(tokens.Accepts("old"));
}

}  // namespace
}  // namespace sluice::rpc
