"""Job modules that acceptance tests load into real `scheduler` processes
(`--jobs tests.acceptance.jobmods.NAME`). Some are broken on purpose."""
