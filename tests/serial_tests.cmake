# Read by ctest after the discovered tests (TEST_INCLUDE_FILES, tests/CMakeLists.txt).
# scripts/test runs the tests in parallel (ctest -j); these run alone (RUN_SERIAL), because
# what they check depends on timing that other tests' load on the same cores could stretch:
# a time bound, a compute time measured by the policy under test, arrival orders behind
# delayed replies, descriptors and memory of a process under a flood.
set(_ferry_serial_tests
  [=[ClusterTest.KilledServerFailsEveryWorkerWithinHeartbeatTimeout]=]
  [=[ClusterTest.StragglerIsNotMistakenForADeadNode]=]
  [=[BadInputTest.OversizedFramesAndConnectionFloodsCostTheServerNothing]=]
  [=[LocalGroupTest.AKilledLocalRootEndsItsPeersAtOnce]=]
  [=[SchedulingOrderTest.CreditDeliversInPriorityOrderAtTheServers]=]
  [=[SchedulingOrderTest.FifoDeliversInReadyOrderAtTheServers]=]
  [=[Profiled/ProfiledDriftTest.AComputeChangeIsDriftTheProfileIsRebuiltAndSumsStayExact/"usbyte"]=]
  [=[Profiled/ProfiledDriftTest.AComputeChangeIsDriftTheProfileIsRebuiltAndSumsStayExact/"prophet"]=]
)
# ctest passes over a name it does not know (a build of only some test programs, as in
# scripts/test-sanitizers' ThreadSanitizer stage, lacks the others' tests).
set_tests_properties(${_ferry_serial_tests} PROPERTIES RUN_SERIAL TRUE)
