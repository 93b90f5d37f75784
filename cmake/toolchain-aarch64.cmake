# Cross build for AArch64 Linux with Debian's GNU toolchain (g++-aarch64-linux-gnu), run under
# qemu-user (qemu-aarch64 -L /usr/aarch64-linux-gnu). Used by scripts/test_aarch64.sh:
#   cmake -S . -B build-arm -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake -DGENIEX_MINIMAL=ON
# The project's compiled dependencies (pcre2, utf8proc, fmt, CLI11...) have no arm64 copies
# here, so the cross build is GENIEX_MINIMAL: the libraries that need none of them, their
# tests, GoogleTest compiled from /usr/src/googletest, and the host's header-only
# nlohmann-json (cmake/minimal_deps.cmake).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(GENIEX_AARCH64_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${GENIEX_AARCH64_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${GENIEX_AARCH64_TRIPLE}-g++)

set(CMAKE_FIND_ROOT_PATH /usr/${GENIEX_AARCH64_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# try_run and test discovery run target programs through qemu.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/${GENIEX_AARCH64_TRIPLE})
