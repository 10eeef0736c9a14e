"""The Ray Serve applications of the example RayService (ray-serve/rayservice.yaml).

The RayService's serveConfigV2 imports them as ``serve_apps.greeter:app`` and
``serve_apps.calc:app``, so the Ray image (or the Ray head's PYTHONPATH) must contain this
package: copy it into your image, or point a runtime_env ``working_dir`` at it.
"""
