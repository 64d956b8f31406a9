// SPDX-License-Identifier: Apache-2.0
// base::ParseCommandLine: the one way sluiced, sluicectl, sluice-call and
// sluice-bench turn a command line into values or a one-line usage error.

#include "base/command_line.h"

#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::base {
namespace {

using Outcome = CommandLine::Outcome;

// argv with the program name in front, as main() gets it.
CommandLine Parse(CLI::App& app, const CommandFlags& flags,
                  std::vector<const char*> args) {
  args.insert(args.begin(), "prog");
  return ParseCommandLine(app, flags, static_cast<int>(args.size()),
                          args.data());
}

// A tool with commands, the way sluicectl builds its command line.
struct Tool {
  Tool() {
    ConfigureApp(app, "usage: prog COMMAND\n");
    app.add_option("--target", target);
    list = AddCommand(app, "list", "usage: prog list\n");
    get = AddCommand(app, "get", "usage: prog get NAME\n");
    get->add_option("NAME", name);
    flags.Add(app.add_option("--key", key), {get});
  }
  CLI::App app{"", "prog"};
  CommandFlags flags;
  CLI::App* list = nullptr;
  CLI::App* get = nullptr;
  std::string target;
  std::string name;
  std::string key;
};

TEST(CommandLineTest, AFlagWithoutItsValueNeedsAValue) {
  Tool tool;
  const CommandLine line = Parse(tool.app, tool.flags, {"list", "--target"});
  EXPECT_EQ(line.outcome, Outcome::kUsageError);
  EXPECT_EQ(line.text, "--target needs a value");

  // sluiced's shape: no commands, the same words.
  CLI::App server("", "server");
  std::string listen;
  server.add_option("--listen", listen);
  const CommandLine server_line = Parse(server, CommandFlags(), {"--listen"});
  EXPECT_EQ(server_line.outcome, Outcome::kUsageError);
  EXPECT_EQ(server_line.text, "--listen needs a value");
}

TEST(CommandLineTest, AnUnknownFlagIsNamedWithoutItsValue) {
  CLI::App app("", "prog");
  const CommandLine line = Parse(app, CommandFlags(), {"--password=hunter2"});
  EXPECT_EQ(line.outcome, Outcome::kUsageError);
  EXPECT_EQ(line.text, "unknown flag --password");
}

TEST(CommandLineTest, AStrayWordIsAnArgumentWhereThereAreNoCommands) {
  CLI::App app("", "prog");
  bool baseline = true;
  app.add_flag("--baseline", baseline);
  const CommandLine line = Parse(app, CommandFlags(), {"--baseline", "false"});
  EXPECT_EQ(line.outcome, Outcome::kUsageError);
  EXPECT_EQ(line.text, "unexpected argument \"false\"");
}

TEST(CommandLineTest, AStrayWordIsAnUnknownCommandWhereThereAreCommands) {
  Tool tool;
  const CommandLine line = Parse(tool.app, tool.flags, {"lsit"});
  EXPECT_EQ(line.outcome, Outcome::kUsageError);
  EXPECT_EQ(line.text, "unknown command \"lsit\"");
}

TEST(CommandLineTest, AnArgumentBeyondTheCommandsOwnNamesTheCommand) {
  Tool tool;
  const CommandLine line = Parse(tool.app, tool.flags, {"get", "a", "b"});
  EXPECT_EQ(line.outcome, Outcome::kUsageError);
  EXPECT_EQ(line.text, "unexpected argument \"b\" for get");
}

TEST(CommandLineTest, WhatFollowsDoubleDashIsAnArgumentNotAFlag) {
  CLI::App app("", "prog");
  const CommandLine line = Parse(app, CommandFlags(), {"--", "--listen"});
  EXPECT_EQ(line.outcome, Outcome::kUsageError);
  EXPECT_EQ(line.text, "unexpected argument \"--listen\"");
}

TEST(CommandLineTest, ACommandFlagGivenToAnotherCommandIsRefused) {
  Tool tool;
  const CommandLine line = Parse(tool.app, tool.flags, {"list", "--key", "k"});
  EXPECT_EQ(line.outcome, Outcome::kUsageError);
  EXPECT_EQ(line.text, "unknown flag --key for list");

  Tool ok;
  EXPECT_EQ(Parse(ok.app, ok.flags, {"--key", "k", "get", "n"}).outcome,
            Outcome::kRun);
  EXPECT_EQ(ok.key, "k");
  EXPECT_EQ(ok.name, "n");
}

TEST(CommandLineTest, FlagEqualsNothingIsAnEmptyValue) {
  Tool tool;
  tool.target = "preset";
  // CLI11 alone would take "--key" as the value of --target.
  const CommandLine line =
      Parse(tool.app, tool.flags, {"--target=", "--key", "k", "get", "n"});
  ASSERT_EQ(line.outcome, Outcome::kRun) << line.text;
  EXPECT_EQ(tool.target, "");
  EXPECT_EQ(tool.key, "k");
}

TEST(CommandLineTest, HelpIsTheCommandsOwnText) {
  Tool tool;
  const CommandLine line = Parse(tool.app, tool.flags, {"get", "--help"});
  EXPECT_EQ(line.outcome, Outcome::kHelp);
  EXPECT_EQ(line.text, "usage: prog get NAME\n");
}

TEST(CommandLineTest, ClientTlsFlagsComeFromTheCommandLineOrTheEnvironment) {
  CLI::App app("", "prog");
  std::string ca, cert, key, server_name;
  AddClientTlsFlags(app, "SLUICE_COMMAND_LINE_TEST",
                    {&ca, &cert, &key, &server_name});
  ASSERT_EQ(setenv("SLUICE_COMMAND_LINE_TEST_TLS_CA", "env-ca.pem", 1), 0);
  ASSERT_EQ(setenv("SLUICE_COMMAND_LINE_TEST_TLS_SERVER_NAME", "env-name", 1),
            0);
  const CommandLine line = Parse(
      app, CommandFlags(),
      {"--tls-cert", "c.pem", "--tls-key=k.pem", "--tls-server-name", "flag"});
  unsetenv("SLUICE_COMMAND_LINE_TEST_TLS_CA");
  unsetenv("SLUICE_COMMAND_LINE_TEST_TLS_SERVER_NAME");
  ASSERT_EQ(line.outcome, Outcome::kRun) << line.text;
  EXPECT_EQ(ca, "env-ca.pem");
  EXPECT_EQ(cert, "c.pem");
  EXPECT_EQ(key, "k.pem");
  EXPECT_EQ(server_name, "flag");  // the command line wins
}

}  // namespace
}  // namespace sluice::base
