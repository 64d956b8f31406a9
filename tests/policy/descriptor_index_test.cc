// SPDX-License-Identifier: Apache-2.0
#include "server/policy/descriptor_index.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/policy_config.h"

namespace sluice::policy {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Entries = std::vector<DescriptorEntry>;
using Policies = std::vector<std::shared_ptr<const core::PolicyConfig>>;

// A policy claiming one descriptor of `domain`: entries "key=value", or
// "key" for any value.
std::shared_ptr<const core::PolicyConfig> Claiming(
    std::string name, std::string domain,
    std::vector<std::pair<std::string, std::string>> entries) {
  auto p = std::make_shared<core::PolicyConfig>();
  p->name = std::move(name);
  core::EnvoyDescriptorConfig d;
  d.domain = std::move(domain);
  for (auto& [key, value] : entries) d.entries.push_back({key, value});
  p->envoy_descriptors.push_back(std::move(d));
  return p;
}

std::string NameOf(const DescriptorIndex::Match& m) {
  return m.policy == nullptr ? "(none)" : m.policy->name;
}

TEST(DescriptorIndexTest, ExactValueWinsOverAnyValue) {
  const DescriptorIndex index(
      Policies{Claiming("exact", "edge", {{"path", "/login"}}),
               Claiming("per_path", "edge", {{"path", ""}})});
  DescriptorIndex::Match m = index.Find("edge", Entries{{"path", "/login"}});
  EXPECT_EQ(NameOf(m), "exact");
  EXPECT_EQ(m.key, "");
  m = index.Find("edge", Entries{{"path", "/cart"}});
  EXPECT_EQ(NameOf(m), "per_path");
  EXPECT_EQ(m.key, "/cart");
}

TEST(DescriptorIndexTest, EntriesMustFollowOnePathToItsEnd) {
  const DescriptorIndex index(Policies{Claiming(
      "users", "edge", {{"tenant", ""}, {"user", ""}})});
  // Too few, too many, out of order, another domain, another key.
  EXPECT_EQ(NameOf(index.Find("edge", Entries{{"tenant", "t"}})), "(none)");
  EXPECT_EQ(NameOf(index.Find(
                "edge", Entries{{"tenant", "t"}, {"user", "u"}, {"x", "y"}})),
            "(none)");
  EXPECT_EQ(NameOf(index.Find("edge", Entries{{"user", "u"}, {"tenant", "t"}})),
            "(none)");
  EXPECT_EQ(NameOf(index.Find("other", Entries{{"tenant", "t"},
                                               {"user", "u"}})),
            "(none)");
  EXPECT_EQ(NameOf(index.Find("edge", Entries{{"tenant", "t"}, {"uzer", "u"}})),
            "(none)");
  EXPECT_EQ(NameOf(index.Find("edge", Entries{})), "(none)");
  EXPECT_EQ(NameOf(index.Find("edge", Entries{{"tenant", "t"}, {"user", "u"}})),
            "users");
}

TEST(DescriptorIndexTest, SeveralAnyValuesMakeOneEscapedKey) {
  const DescriptorIndex index(Policies{Claiming(
      "users", "edge", {{"tenant", ""}, {"plan", "gold"}, {"user", ""}})});
  DescriptorIndex::Match m = index.Find(
      "edge", Entries{{"tenant", "a|b"}, {"plan", "gold"}, {"user", "c\\d"}});
  EXPECT_EQ(NameOf(m), "users");
  EXPECT_EQ(m.key, "a\\|b|c\\\\d");
  // The values that would collide unescaped make another key.
  m = index.Find("edge", Entries{{"tenant", "a"},
                                 {"plan", "gold"},
                                 {"user", "b|c\\d"}});
  EXPECT_EQ(m.key, "a|b\\|c\\\\d");
}

TEST(DescriptorIndexTest, OneAnyValueIsTheKeyAsSent) {
  const DescriptorIndex index(
      Policies{Claiming("per_ip", "edge", {{"remote_address", ""}})});
  const DescriptorIndex::Match m =
      index.Find("edge", Entries{{"remote_address", "10.0.0.1|x\\y"}});
  EXPECT_EQ(NameOf(m), "per_ip");
  EXPECT_EQ(m.key, "10.0.0.1|x\\y");
}

TEST(DescriptorIndexTest, FirstByNameAnswersAConflict) {
  const DescriptorIndex index(
      Policies{Claiming("alpha", "edge", {{"path", ""}}),
               Claiming("beta", "edge", {{"path", ""}})},
      7);
  EXPECT_EQ(NameOf(index.Find("edge", Entries{{"path", "/"}})), "alpha");
  ASSERT_EQ(index.conflicts().size(), 1u);
  EXPECT_THAT(index.conflicts()[0],
              HasSubstr("is claimed by policies \"alpha\" and \"beta\""));
  EXPECT_THAT(index.conflicts()[0], HasSubstr("\"path\": *"));
  EXPECT_EQ(index.generation(), 7u);
  EXPECT_FALSE(index.empty());
}

TEST(DescriptorIndexTest, NoDescriptorsMatchNothing) {
  auto plain = std::make_shared<core::PolicyConfig>();
  plain->name = "plain";
  const DescriptorIndex index(Policies{plain});
  EXPECT_TRUE(index.empty());
  EXPECT_THAT(index.conflicts(), ElementsAre());
  EXPECT_EQ(NameOf(index.Find("edge", Entries{{"path", "/"}})), "(none)");
}

}  // namespace
}  // namespace sluice::policy
