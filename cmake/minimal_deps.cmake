# Dependencies of a GENIEX_MINIMAL build (see CMakeLists.txt): only nlohmann-json, header-only.
# A cross build must not put the host's /usr/include on the target compiler's search path
# (its C library headers are the host's), so the host's nlohmann/ folder is linked alone into
# the build tree and used from there.
if(CMAKE_CROSSCOMPILING)
  find_path(GENIEX_HOST_NLOHMANN_INCLUDE nlohmann/json.hpp PATHS /usr/include /usr/local/include
            NO_DEFAULT_PATH NO_CMAKE_FIND_ROOT_PATH)
  if(NOT GENIEX_HOST_NLOHMANN_INCLUDE)
    message(FATAL_ERROR "nlohmann/json.hpp not found on the host (install nlohmann-json3-dev)")
  endif()
  set(_geniex_shim ${CMAKE_BINARY_DIR}/host-headers)
  file(MAKE_DIRECTORY ${_geniex_shim})
  if(NOT EXISTS ${_geniex_shim}/nlohmann)
    file(CREATE_LINK ${GENIEX_HOST_NLOHMANN_INCLUDE}/nlohmann ${_geniex_shim}/nlohmann SYMBOLIC)
  endif()
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  target_include_directories(nlohmann_json::nlohmann_json SYSTEM INTERFACE ${_geniex_shim})
else()
  find_package(nlohmann_json 3 REQUIRED)
endif()
