// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_BUILD_PATHS_H_
#define SLUICE_TESTS_TESTING_BUILD_PATHS_H_

// Where this build put the programs that the integration tests start, and
// where the source tree is: absolute paths, or "" for a program the build
// does not have (the example gateway with -DSLUICE_BUILD_EXAMPLES=OFF).
//
// They are defined in one file CMake generates into the build directory
// (tests/CMakeLists.txt), not passed to each test as compile definitions:
// then no test's object depends on where its build directory is, and a
// clone of the repository elsewhere on the machine hits the compiler cache
// for every test.

namespace sluice::testing {

extern const char kSluicedPath[];
extern const char kSluicectlPath[];
extern const char kSluiceCallPath[];
extern const char kSluiceBenchPath[];
extern const char kExampleGatewayPath[];
extern const char kExampleBackendPath[];
// Preloaded after libfaketime (tests/testing/faketime_futex_shim.cc).
extern const char kFaketimeFutexShimPath[];
// Preloaded into a redis-server to set its clock
// (tests/testing/store_clock_shim.cc).
extern const char kStoreClockShimPath[];
// The repository root, for files under deploy/.
extern const char kSourceDir[];

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_BUILD_PATHS_H_
