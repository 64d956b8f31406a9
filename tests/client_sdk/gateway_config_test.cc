// SPDX-License-Identifier: Apache-2.0
// The example gateway's sluice_tls block: its fields reach ClientOptions'
// TlsOptions, and a misspelt one is refused by name.

#include "gateway_config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::examples {
namespace {

using ::testing::HasSubstr;

constexpr char kRoutes[] =
    "routes:\n"
    "  - prefix: /api\n"
    "    dependency: catalog\n"
    "    backend: http://127.0.0.1:8081\n";

TEST(GatewayConfigTest, SluiceTlsFillsTheClientsTlsOptions) {
  absl::StatusOr<GatewayConfig> config =
      ParseGatewayConfig(std::string("sluice: sluice.prod.svc:50051\n"
                                     "sluice_tls:\n"
                                     "  ca_file: /etc/tls/ca.crt\n"
                                     "  cert_file: /etc/tls/tls.crt\n"
                                     "  key_file: /etc/tls/tls.key\n"
                                     "  server_name: sluice\n") +
                             kRoutes,
                         "gateway.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->sluice_tls.ca_file, "/etc/tls/ca.crt");
  EXPECT_EQ(config->sluice_tls.cert_file, "/etc/tls/tls.crt");
  EXPECT_EQ(config->sluice_tls.key_file, "/etc/tls/tls.key");
  EXPECT_EQ(config->sluice_tls.server_name, "sluice");
}

TEST(GatewayConfigTest, WithoutSluiceTlsThereIsNoTls) {
  absl::StatusOr<GatewayConfig> config =
      ParseGatewayConfig(kRoutes, "gateway.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->sluice_tls.ca_file.empty());
  EXPECT_TRUE(config->sluice_tls.cert_file.empty());
}

TEST(GatewayConfigTest, AnUnknownSluiceTlsFieldIsNamed) {
  absl::StatusOr<GatewayConfig> config = ParseGatewayConfig(
      std::string("sluice_tls:\n  cafile: /etc/tls/ca.crt\n") + kRoutes,
      "gateway.yaml");
  EXPECT_THAT(config.status().message(),
              HasSubstr("gateway.yaml: sluice_tls.cafile is not a field"));
}

}  // namespace
}  // namespace sluice::examples
