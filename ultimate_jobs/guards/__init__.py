"""What refuses: the admission check every request passes (``admission``), the tenant guard on the ORM
(``tenancy``) and in the database (``row_security``, with each session kept to the ambient scope by
``session_scope``), per-tenant limits (``limits``), and the sealing and redaction that keep secrets out
of rows and logs (``sealing``, ``redaction``)."""
