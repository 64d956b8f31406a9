// sluicectl's output formats: what scripts parse must stay JSON whatever
// text the server sends back.

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sluice/v1/admin.pb.h"
#include "tools/sluicectl/output_format.h"

namespace sluice::ctl {
namespace {

TEST(ApplyResultJsonTest, KeepsTheShapeScriptsRead) {
  EXPECT_EQ(
      ApplyResultJson({"inventory", "create", "ok", 3}),
      R"({"name":"inventory","action":"create","result":"ok","version":3})");
}

TEST(ApplyResultJsonTest,
     AServerMessageWithQuotesBackslashesAndNewlinesStaysJson) {
  const std::string message =
      "failed: policy \"inventory\": path C:\\policies\nsecond line\ttab";
  const std::string line = ApplyResultJson({"inventory", "update", message, 7});

  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line per policy";
  const nlohmann::json parsed =
      nlohmann::json::parse(line);  // throws if not JSON
  EXPECT_EQ(parsed.at("name"), "inventory");
  EXPECT_EQ(parsed.at("action"), "update");
  EXPECT_EQ(parsed.at("result"), message);
  EXPECT_EQ(parsed.at("version"), 7);
}

TEST(ApplyResultJsonTest, TextThatIsNotUtf8IsReplacedNotThrown) {
  const std::string line =
      ApplyResultJson({"inventory", "update", "failed: \xff\xfe", 1});
  EXPECT_TRUE(nlohmann::json::accept(line)) << line;
}

TEST(MessageJsonTest, UsesProtoFieldNamesAndEscapes) {
  v1::Event event;
  event.set_kind(v1::Event::OVERRIDE_SET);
  event.set_cause("note \"INC-7\"\\\nnext");
  event.set_replica_id("r1");
  const std::string line = MessageJson(event, /*pretty=*/false);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const nlohmann::json parsed = nlohmann::json::parse(line);
  EXPECT_EQ(parsed.at("cause"), event.cause());
  EXPECT_EQ(parsed.at("replica_id"), "r1");
}

TEST(FormatTableTest, AlignsColumnsTwoSpacesApart) {
  EXPECT_EQ(FormatTable({{"NAME", "VERSION"}, {"inventory", "4"}}),
            "NAME       VERSION\n"
            "inventory  4\n");
}

}  // namespace
}  // namespace sluice::ctl
