"""Django glue beyond the admin and the commands: the JSON views, the ``/metrics`` view, the console log
format of the role commands, and the migration operations the app's migrations use."""
